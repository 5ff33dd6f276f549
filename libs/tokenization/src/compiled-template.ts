/**
 * A chat template compiled to JavaScript closures over plain values, for the renders that @huggingface/jinja's
 * interpreter makes on every chat request (chat-template.ts): the interpreter wraps every value it touches in a
 * runtime object and walks the syntax tree on each render (~10–15 µs for one short message, about half of a small
 * chat's tokenization, measured); the closures do the same work without either.
 *
 * It covers the constructs the tested templates use (Qwen3, Llama 3.1, DeepSeek V3: if, for with `loop`, set and
 * namespaces, members and slices, string methods, `tojson`/`length`/`trim`, tests, arithmetic on integers) and
 * reproduces the interpreter's results for them, its quirks included (`strip('\n')` strips all whitespace, a
 * boolean prints as `true`). Anything else is refused, never guessed:
 * - a construct outside that set: `compileTemplate` returns null and every render goes to the interpreter;
 * - a value outside it at render time (a float in arithmetic, a method it does not know, `raise_exception`, an
 *   operation the interpreter would throw on): the render throws `Unsupported`, and the caller renders with the
 *   interpreter, which gives the result or the error the request gets.
 * compiled-template.test.ts renders random conversations both ways with each tested template.
 */

/** Thrown at render time for what only the interpreter may decide. */
export class Unsupported extends Error {}

/** A compiled template: the rendering of `variables`, or Unsupported. */
export type CompiledTemplate = (variables: Readonly<Record<string, unknown>>) => string;

/** A syntax-tree node of @huggingface/jinja (its fields per `type`: dist/ast.d.ts). */
interface TemplateNode {
  readonly type: string;
  readonly [field: string]: unknown;
}

type Scope = { readonly vars: Map<string, unknown>; readonly parent: Scope | null };
type Evaluate = (scope: Scope) => unknown;
type Render = (scope: Scope) => string;

/** Jinja's undefined (a missing variable, member or item), apart from JavaScript's. */
const UNDEFINED = Object.freeze({ undefined: true });

class Namespace {
  constructor(readonly values: Map<string, unknown>) {}
}

class LoopState {
  constructor(
    readonly index0: number,
    readonly length: number,
    readonly previous: unknown,
    readonly next: unknown,
  ) {}
}

/** A string's method, taken as a member and not yet called. */
class StringMethod {
  constructor(
    readonly target: string,
    readonly name: string,
  ) {}
}

/** The interpreter's own functions: calls of them go to the interpreter, `namespace` excepted. */
class Builtin {
  constructor(readonly name: string) {}
}

/** The interpreter's globals, the scope around a render's variables (a top-level set shadows one, as it replaces it there). */
const GLOBALS: Scope = {
  parent: null,
  vars: new Map<string, unknown>([
    ['false', false],
    ['true', true],
    ['none', null],
    ['False', false],
    ['True', true],
    ['None', null],
    ['raise_exception', new Builtin('raise_exception')],
    ['range', new Builtin('range')],
    ['strftime_now', new Builtin('strftime_now')],
    ['namespace', new Builtin('namespace')],
  ]),
};

/** ObjectValue's builtins: a member of an object that is not its own key and names one of these is a method. */
const OBJECT_METHODS = new Set(['get', 'items', 'keys', 'values', 'dictsort']);

const STRING_METHODS = new Set(['upper', 'lower', 'strip', 'lstrip', 'rstrip', 'startswith', 'endswith', 'split']);

function unsupported(): never {
  throw new Unsupported();
}

/** Compiles a parsed template; null when it uses a construct this does not cover. */
export function compileTemplate(program: unknown): CompiledTemplate | null {
  let body: Render;
  try {
    body = block((program as TemplateNode).body as TemplateNode[]);
  } catch (error) {
    if (error instanceof Unsupported) return null;
    throw error;
  }
  return (variables) => {
    const vars = new Map<string, unknown>();
    for (const name of Object.keys(variables)) {
      // The interpreter refuses a variable that shadows one of its globals ("already declared").
      if (GLOBALS.vars.has(name)) unsupported();
      vars.set(name, variables[name]);
    }
    return body({ vars, parent: GLOBALS });
  };
}

function block(statements: readonly TemplateNode[]): Render {
  const parts = statements.map(statement);
  if (parts.length === 1) return parts[0] as Render;
  return (scope) => {
    let out = '';
    for (const part of parts) out += part(scope);
    return out;
  };
}

function statement(node: TemplateNode): Render {
  switch (node.type) {
    case 'StringLiteral': {
      const text = node['value'] as string;
      return () => text;
    }
    case 'Comment':
      return () => '';
    case 'If': {
      const test = expression(node['test'] as TemplateNode);
      const body = block(node['body'] as TemplateNode[]);
      const alternate = block(node['alternate'] as TemplateNode[]);
      return (scope) => (truthy(test(scope)) ? body(scope) : alternate(scope));
    }
    case 'For':
      return forLoop(node);
    case 'Set':
      return assignment(node);
    case 'Program':
    case 'Macro':
    case 'CallStatement':
    case 'FilterStatement':
    case 'Break':
    case 'Continue':
      return unsupported();
    default: {
      const value = expression(node);
      return (scope) => printed(value(scope));
    }
  }
}

/** What an expression statement adds to the output (renderBlock's toString). */
function printed(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || value === UNDEFINED) return '';
  if (typeof value === 'boolean') return String(value);
  if (isInteger(value)) return String(value);
  return unsupported();
}

function forLoop(node: TemplateNode): Render {
  const loopvar = node['loopvar'] as TemplateNode;
  const iterableNode = node['iterable'] as TemplateNode;
  if (loopvar.type !== 'Identifier' || iterableNode.type === 'SelectExpression') return unsupported();
  const name = loopvar['value'] as string;
  const iterable = expression(iterableNode);
  const body = block(node['body'] as TemplateNode[]);
  const otherwise = block(node['defaultBlock'] as TemplateNode[]);
  return (parent) => {
    // One scope for the whole loop, as the interpreter's: a variable set in one pass is seen by the next.
    const scope: Scope = { vars: new Map(), parent };
    const over = iterable(scope);
    const items = Array.isArray(over) ? over.slice() : isPlainObject(over) ? Object.keys(over) : unsupported();
    let out = '';
    for (let i = 0; i < items.length; i++) {
      scope.vars.set(
        'loop',
        new LoopState(
          i,
          items.length,
          i > 0 ? items[i - 1] : UNDEFINED,
          i < items.length - 1 ? items[i + 1] : UNDEFINED,
        ),
      );
      scope.vars.set(name, items[i]);
      out += body(scope);
    }
    return items.length === 0 ? out + otherwise(scope) : out;
  };
}

function assignment(node: TemplateNode): Render {
  if (node['value'] === null) return unsupported();
  const value = expression(node['value'] as TemplateNode);
  const assignee = node['assignee'] as TemplateNode;
  if (assignee.type === 'Identifier') {
    const name = assignee['value'] as string;
    // The interpreter declares `namespace` afresh in every scope (a loop's too): its shadowing is left to it.
    if (name === 'namespace') return unsupported();
    return (scope) => {
      scope.vars.set(name, value(scope));
      return '';
    };
  }
  const property = assignee['property'] as TemplateNode | undefined;
  if (assignee.type !== 'MemberExpression' || property?.type !== 'Identifier') return unsupported();
  const object = expression(assignee['object'] as TemplateNode);
  const key = property['value'] as string;
  return (scope) => {
    // The value first, then the object: the interpreter's order.
    const assigned = value(scope);
    const target = object(scope);
    if (!(target instanceof Namespace)) return unsupported();
    target.values.set(key, assigned);
    return '';
  };
}

function expression(node: TemplateNode): Evaluate {
  switch (node.type) {
    case 'StringLiteral':
    case 'IntegerLiteral': {
      const value = node['value'];
      return () => value;
    }
    case 'ArrayLiteral': {
      const items = (node['value'] as TemplateNode[]).map(expression);
      return (scope) => items.map((item) => item(scope));
    }
    case 'Identifier': {
      const name = node['value'] as string;
      return (scope) => lookup(scope, name);
    }
    case 'MemberExpression':
      return member(node);
    case 'CallExpression':
      return call(node);
    case 'BinaryExpression':
      return binary(node);
    case 'UnaryExpression':
      return unary(node);
    case 'TestExpression':
      return test(node);
    case 'FilterExpression':
      return filter(node);
    case 'SelectExpression': {
      // `a if b` without else: undefined when b is false.
      const lhs = expression(node['lhs'] as TemplateNode);
      const condition = expression(node['test'] as TemplateNode);
      return (scope) => (truthy(condition(scope)) ? lhs(scope) : UNDEFINED);
    }
    case 'Ternary': {
      const condition = expression(node['condition'] as TemplateNode);
      const yes = expression(node['trueExpr'] as TemplateNode);
      const no = expression(node['falseExpr'] as TemplateNode);
      return (scope) => (truthy(condition(scope)) ? yes(scope) : no(scope));
    }
    default:
      return unsupported();
  }
}

function lookup(scope: Scope, name: string): unknown {
  for (let at: Scope | null = scope; at !== null; at = at.parent) {
    if (at.vars.has(name)) return orUndefined(at.vars.get(name));
  }
  return UNDEFINED;
}

function member(node: TemplateNode): Evaluate {
  const object = expression(node['object'] as TemplateNode);
  const property = node['property'] as TemplateNode;
  if (node['computed'] === true && property.type === 'SliceExpression') return slice(object, property);
  if (node['computed'] === true) {
    const key = expression(property);
    return (scope) => {
      const target = object(scope);
      return memberOf(target, key(scope));
    };
  }
  const key = property['value'];
  return (scope) => memberOf(object(scope), key);
}

/** evaluateMemberExpression over plain values. */
function memberOf(target: unknown, key: unknown): unknown {
  if (typeof key !== 'string' && !isInteger(key)) return unsupported();
  if (target === null || target === UNDEFINED) return UNDEFINED;
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

function slice(object: Evaluate, node: TemplateNode): Evaluate {
  const bound = (field: string): Evaluate => {
    const part = node[field] as TemplateNode | undefined;
    return part === undefined ? () => UNDEFINED : expression(part);
  };
  const [start, stop, step] = [bound('start'), bound('stop'), bound('step')];
  return (scope) => {
    const target = object(scope);
    const ends = [start(scope), stop(scope), step(scope)].map((end) =>
      end === UNDEFINED ? undefined : isInteger(end) ? end : unsupported(),
    );
    if (Array.isArray(target)) return sliced(target, ends[0], ends[1], ends[2]);
    if (typeof target === 'string') return sliced(Array.from(target), ends[0], ends[1], ends[2]).join('');
    return unsupported();
  };
}

/** The interpreter's slice (Python's), step ≠ 0. */
function sliced<T>(items: readonly T[], from: number | undefined, to: number | undefined, by = 1): T[] {
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

function call(node: TemplateNode): Evaluate {
  const callee = expression(node['callee'] as TemplateNode);
  const args = node['args'] as TemplateNode[];
  const keywords = args.filter((arg) => arg.type === 'KeywordArgumentExpression');
  if (keywords.length > 0) {
    // Only namespace(name=value, …) takes keyword arguments here.
    if (keywords.length !== args.length) return unsupported();
    const fields = keywords.map((arg) => ({
      name: (arg['key'] as TemplateNode)['value'] as string,
      value: expression(arg['value'] as TemplateNode),
    }));
    return (scope) => {
      const values = new Map<string, unknown>();
      for (const field of fields) values.set(field.name, field.value(scope));
      const fn = callee(scope);
      if (!(fn instanceof Builtin) || fn.name !== 'namespace') return unsupported();
      return new Namespace(values);
    };
  }
  const positional = args.map(expression);
  return (scope) => {
    const values = positional.map((arg) => arg(scope));
    const fn = callee(scope);
    return fn instanceof StringMethod ? stringMethod(fn, values) : unsupported();
  };
}

/** The interpreter's string methods (its own rules: strip and its kin take no characters, whatever is given). */
function stringMethod(method: StringMethod, args: readonly unknown[]): unknown {
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

function binary(node: TemplateNode): Evaluate {
  const operator = (node['operator'] as { value: string }).value;
  const left = expression(node['left'] as TemplateNode);
  const right = expression(node['right'] as TemplateNode);
  switch (operator) {
    case 'and':
      return (scope) => {
        const l = left(scope);
        return truthy(l) ? right(scope) : l;
      };
    case 'or':
      return (scope) => {
        const l = left(scope);
        return truthy(l) ? l : right(scope);
      };
    case '==':
    case '!=':
      return (scope) => {
        const same = equal(left(scope), right(scope));
        return operator === '==' ? same : !same;
      };
    case '+':
    case '-':
    case '*':
    case '<':
    case '>':
    case '<=':
    case '>=':
    case 'in':
    case 'not in':
      return (scope) => operate(operator, left(scope), right(scope));
    default:
      return unsupported();
  }
}

/** `left.value == right.value`, the interpreter's equality, where plain values agree with it. */
function equal(left: unknown, right: unknown): boolean {
  const a = left === UNDEFINED ? undefined : left;
  const b = right === UNDEFINED ? undefined : right;
  if (isPrimitive(a) && isPrimitive(b)) return a == b;
  if (Array.isArray(a) && Array.isArray(b)) return a === b;
  if (isPlainObject(a) && isPlainObject(b)) return a === b;
  return unsupported();
}

function operate(operator: string, a: unknown, b: unknown): unknown {
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
    else if (Array.isArray(b) && a !== UNDEFINED && a !== null && typeof a !== 'object') found = b.includes(a);
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

function unary(node: TemplateNode): Evaluate {
  const operator = (node['operator'] as { value: string }).value;
  const argument = expression(node['argument'] as TemplateNode);
  if (operator === 'not') return (scope) => !truthy(argument(scope));
  if (operator !== '-' && operator !== '+') return unsupported();
  return (scope) => {
    const value = argument(scope);
    if (!isInteger(value)) return unsupported();
    return operator === '-' ? -value : value;
  };
}

function test(node: TemplateNode): Evaluate {
  const operand = expression(node['operand'] as TemplateNode);
  const name = (node['test'] as TemplateNode)['value'] as string;
  const check = TESTS.get(name);
  if (check === undefined) return unsupported();
  const negate = node['negate'] === true;
  return (scope) => check(operand(scope)) !== negate;
}

const TESTS = new Map<string, (value: unknown) => boolean>([
  ['defined', (value) => value !== UNDEFINED],
  ['undefined', (value) => value === UNDEFINED],
  ['none', (value) => value === null],
  ['string', (value) => typeof value === 'string'],
  ['boolean', (value) => typeof value === 'boolean'],
  ['false', (value) => value === false],
  ['true', (value) => value === true],
  ['integer', (value) => (typeof value === 'number' ? Number.isInteger(value) : false)],
  ['number', (value) => typeof value === 'number'],
  ['mapping', (value) => isPlainObject(value) || value instanceof LoopState],
  ['iterable', (value) => Array.isArray(value) || typeof value === 'string'],
]);

function filter(node: TemplateNode): Evaluate {
  const operand = expression(node['operand'] as TemplateNode);
  const which = node['filter'] as TemplateNode;
  if (which.type !== 'Identifier') return unsupported();
  switch (which['value']) {
    case 'tojson':
      return (scope) => toJson(operand(scope));
    case 'length':
      return (scope) => {
        const value = operand(scope);
        if (typeof value === 'string' || Array.isArray(value)) return value.length;
        return isPlainObject(value) ? Object.keys(value).length : unsupported();
      };
    case 'trim':
      return (scope) => {
        const value = operand(scope);
        return typeof value === 'string' ? value.trim() : unsupported();
      };
    default:
      return unsupported();
  }
}

/** The interpreter's toJSON without options: `, ` and `: `, non-ASCII kept, undefined as null. */
function toJson(value: unknown): string {
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
function truthy(value: unknown): boolean {
  if (value === UNDEFINED || value === null) return false;
  if (Array.isArray(value)) return value.length > 0;
  if (value instanceof LoopState || value instanceof Namespace || value instanceof StringMethod) return true;
  if (isPlainObject(value)) return Object.keys(value).length > 0;
  if (typeof value === 'function' || value instanceof Builtin) return true;
  return Boolean(value);
}

function isPrimitive(value: unknown): boolean {
  return value === null || value === undefined || typeof value !== 'object';
}

function isInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function orUndefined(value: unknown): unknown {
  return value === undefined ? UNDEFINED : value;
}
