/**
 * The values a compiled chat template (compiled-template.ts) computes with, and @huggingface/jinja's rules over them,
 * as its interpreter (0.5.13, dist/index.js) applies them to its runtime values: truthiness, equality, operators,
 * members, slices, string methods, tests, `tojson`, printing. Where a plain value cannot follow a rule exactly, the
 * function throws Unsupported and that render goes to the interpreter.
 */

/** Thrown at render time for what only the interpreter may decide. */
export class Unsupported extends Error {}

/** Jinja's undefined (a missing variable, member or item), apart from JavaScript's; not a plain object. */
class Undefined {}

export const UNDEFINED = new Undefined();

export class Namespace {
  constructor(readonly values: Map<string, unknown>) {}
}

export class LoopState {
  constructor(
    readonly index0: number,
    readonly length: number,
    readonly previous: unknown,
    readonly next: unknown,
  ) {}
}

/** A string's method, taken as a member and not yet called. */
export class StringMethod {
  constructor(
    readonly target: string,
    readonly name: string,
  ) {}
}

/** The interpreter's own functions: calls of them go to the interpreter, `namespace` excepted. */
export class Builtin {
  constructor(readonly name: string) {}
}

/** ObjectValue's builtins: a member of an object that is not its own key and names one of these is a method. */
const OBJECT_METHODS = new Set(['get', 'items', 'keys', 'values', 'dictsort']);

const STRING_METHODS = new Set(['upper', 'lower', 'strip', 'lstrip', 'rstrip', 'startswith', 'endswith', 'split']);

export function unsupported(): never {
  throw new Unsupported();
}

/** What an expression statement adds to the output (renderBlock's toString). */
export function printed(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || value === UNDEFINED) return '';
  if (typeof value === 'boolean') return String(value);
  if (isInteger(value)) return String(value);
  return unsupported();
}

/** evaluateMemberExpression over plain values. */
export function memberOf(target: unknown, key: unknown): unknown {
  if (typeof key !== 'string' && !isInteger(key)) return unsupported();
  // The interpreter reads a name on none or undefined as undefined, and fails on an index.
  if (target === null || target === UNDEFINED) return typeof key === 'string' ? UNDEFINED : unsupported();
  if (typeof target === 'string') {
    if (typeof key === 'number') return orUndefined(target.at(key));
    if (key === 'length') return target.length;
    return STRING_METHODS.has(key) ? new StringMethod(target, key) : unsupported();
  }
  if (Array.isArray(target)) {
    if (typeof key === 'number') return orUndefined(target.at(key));
    return key === 'length' ? target.length : UNDEFINED;
  }
  if (typeof key !== 'string') return unsupported();
  if (target instanceof Namespace) return orUndefined(target.values.get(key));
  if (target instanceof LoopState) return loopMember(target, key);
  if (isPlainObject(target)) {
    if (Object.hasOwn(target, key)) return orUndefined(target[key]);
    // Not the object's own: one of the interpreter's object methods (left to it), else undefined.
    return OBJECT_METHODS.has(key) ? unsupported() : UNDEFINED;
  }
  return unsupported();
}

function loopMember(loop: LoopState, key: string): unknown {
  switch (key) {
    case 'index':
      return loop.index0 + 1;
    case 'index0':
      return loop.index0;
    case 'revindex':
      return loop.length - loop.index0;
    case 'revindex0':
      return loop.length - loop.index0 - 1;
    case 'first':
      return loop.index0 === 0;
    case 'last':
      return loop.index0 === loop.length - 1;
    case 'length':
      return loop.length;
    case 'previtem':
      return loop.previous;
    case 'nextitem':
      return loop.next;
    default:
      return unsupported();
  }
}

/** The interpreter's slice (Python's), step ≠ 0. */
export function sliced<T>(items: readonly T[], from: number | undefined, to: number | undefined, by = 1): T[] {
  const direction = Math.sign(by);
  if (direction === 0) return unsupported();
  const n = items.length;
  let start: number;
  let stop: number;
  if (direction > 0) {
    start = from === undefined ? 0 : from < 0 ? Math.max(n + from, 0) : Math.min(from, n);
    stop = to === undefined ? n : to < 0 ? Math.max(n + to, 0) : Math.min(to, n);
  } else {
    start = from === undefined ? n - 1 : from < 0 ? Math.max(n + from, -1) : Math.min(from, n - 1);
    stop = to === undefined ? -1 : to < -1 ? Math.max(n + to, -1) : Math.min(to, n - 1);
  }
  const out: T[] = [];
  for (let i = start; direction * i < direction * stop; i += by) out.push(items[i] as T);
  return out;
}

/** The interpreter's string methods (its own rules: strip and its kin take no characters, whatever is given). */
export function stringMethod(method: StringMethod, args: readonly unknown[]): unknown {
  const text = method.target;
  switch (method.name) {
    case 'upper':
      return text.toUpperCase();
    case 'lower':
      return text.toLowerCase();
    case 'strip':
      return text.trim();
    case 'lstrip':
      return text.trimStart();
    case 'rstrip':
      return text.trimEnd();
    case 'startswith':
    case 'endswith': {
      const pattern = args[0];
      if (typeof pattern !== 'string') return unsupported();
      return method.name === 'startswith' ? text.startsWith(pattern) : text.endsWith(pattern);
    }
    case 'split': {
      const separator = args[0];
      if (args.length !== 1 || typeof separator !== 'string' || separator === '') return unsupported();
      return text.split(separator);
    }
    default:
      return unsupported();
  }
}

/** `left.value == right.value`, the interpreter's equality, where plain values agree with it. */
export function equal(left: unknown, right: unknown): boolean {
  const a = left === UNDEFINED ? undefined : left;
  const b = right === UNDEFINED ? undefined : right;
  if (isPrimitive(a) && isPrimitive(b)) return a == b;
  // The interpreter converts every value it is given apart: one list or object reached twice is two values to it,
  // equal to nothing but itself, which a plain value cannot tell.
  if ((Array.isArray(a) || isPlainObject(a)) && (Array.isArray(b) || isPlainObject(b)))
    return a === b ? unsupported() : false;
  return unsupported();
}

export function operate(operator: string, a: unknown, b: unknown): unknown {
  if (isInteger(a) && isInteger(b)) {
    switch (operator) {
      case '+':
        return a + b;
      case '-':
        return a - b;
      case '*':
        return a * b;
      case '<':
        return a < b;
      case '>':
        return a > b;
      case '<=':
        return a <= b;
      case '>=':
        return a >= b;
      default:
        return unsupported();
    }
  }
  if (operator === 'in' || operator === 'not in') {
    let found: boolean;
    if (b === UNDEFINED) found = false;
    else if (typeof a === 'string' && typeof b === 'string') found = b.includes(a);
    else if (Array.isArray(b) && (typeof a === 'string' || typeof a === 'boolean' || isInteger(a)))
      found = b.includes(a);
    else if (typeof a === 'string' && isPlainObject(b)) found = Object.hasOwn(b, a);
    else return unsupported();
    return operator === 'in' ? found : !found;
  }
  if (operator === '+') {
    if (Array.isArray(a) && Array.isArray(b)) return a.concat(b);
    if (typeof a === 'string' && typeof b === 'string') return a + b;
    if ((typeof a === 'string' && isInteger(b)) || (isInteger(a) && typeof b === 'string')) return `${a}${b}`;
  }
  return unsupported();
}

export const TESTS = new Map<string, (value: unknown) => boolean>([
  ['defined', (value) => value !== UNDEFINED],
  ['undefined', (value) => value === UNDEFINED],
  ['none', (value) => value === null],
  ['string', (value) => typeof value === 'string'],
  ['boolean', (value) => typeof value === 'boolean'],
  ['false', (value) => value === false],
  ['true', (value) => value === true],
  ['integer', (value) => (typeof value === 'number' ? Number.isInteger(value) : false)],
  ['number', (value) => typeof value === 'number'],
  [
    'mapping',
    (value) => isPlainObject(value) || value instanceof LoopState || (isForeignObject(value) && unsupported()),
  ],
  ['iterable', (value) => Array.isArray(value) || typeof value === 'string'],
]);

/** The interpreter's toJSON without options: `, ` and `: `, non-ASCII kept, undefined as null. */
export function toJson(value: unknown): string {
  if (value === null || value === UNDEFINED || value === undefined) return 'null';
  if (typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number')
    return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(toJson).join(', ')}]`;
  if (isPlainObject(value) || value instanceof Namespace) {
    const entries = value instanceof Namespace ? [...value.values] : Object.entries(value);
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}: ${toJson(item)}`).join(', ')}}`;
  }
  return unsupported();
}

/** RuntimeValue.__bool__ per type (a namespace is always true, an object when it has a key). */
export function truthy(value: unknown): boolean {
  if (value === UNDEFINED || value === null) return false;
  if (Array.isArray(value)) return value.length > 0;
  if (value instanceof LoopState || value instanceof Namespace || value instanceof StringMethod) return true;
  if (isPlainObject(value)) return Object.keys(value).length > 0;
  if (typeof value === 'function' || value instanceof Builtin) return true;
  // A Date, a Map, a class's instance: the interpreter makes a mapping of its enumerable keys.
  if (isForeignObject(value)) return unsupported();
  return Boolean(value);
}

/** An object that is none of the values this file makes or reads (plain objects, arrays, its own classes). */
function isForeignObject(value: unknown): boolean {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || isPlainObject(value)) return false;
  return !(
    value instanceof Undefined ||
    value instanceof Namespace ||
    value instanceof LoopState ||
    value instanceof StringMethod ||
    value instanceof Builtin
  );
}

function isPrimitive(value: unknown): boolean {
  return value === null || value === undefined || (typeof value !== 'object' && typeof value !== 'function');
}

export function isInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value);
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

export function orUndefined(value: unknown): unknown {
  return value === undefined ? UNDEFINED : value;
}
