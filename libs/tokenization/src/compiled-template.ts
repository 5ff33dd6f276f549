/**
 * A chat template compiled to JavaScript closures over plain values, for the renders that @huggingface/jinja's
 * interpreter makes on every chat request (chat-template.ts): the interpreter wraps every value it touches in a
 * runtime object and walks the syntax tree on each render (4–15 µs for one short message with the tested templates,
 * up to half of a small chat's tokenization, measured); the closures do the same work without either.
 *
 * It covers the constructs the tested templates use (Qwen3, Llama 3.1, DeepSeek V3: if, for with `loop`, set and
 * namespaces, members and slices, string methods, `tojson`/`length`/`trim`, tests, arithmetic on integers) and
 * reproduces the interpreter's results for them, its quirks included (`strip('\n')` strips all whitespace, a
 * boolean prints as `true`). Anything else is refused, never guessed:
 * - a construct outside that set: `compileTemplate` returns null and every render goes to the interpreter;
 * - a value outside it at render time (a float in arithmetic, a method it does not know, `raise_exception`, an
 *   operation the interpreter would throw on): the render throws `Unsupported`, and the caller renders with the
 *   interpreter, which gives the result or the error the request gets.
 * Variables are JSON-like, as a request's are (plain objects, arrays, strings, finite numbers, booleans, null): an
 * object that is not plain is left to the interpreter where it is read, but an input the interpreter cannot convert
 * at all (a BigInt, a cycle) or a non-enumerable property is not looked for.
 * compiled-template.test.ts renders random conversations both ways with each tested template.
 */

import {
  Builtin,
  equal,
  isInteger,
  isPlainObject,
  LoopState,
  memberOf,
  Namespace,
  operate,
  orUndefined,
  printed,
  sliced,
  StringMethod,
  stringMethod,
  TESTS,
  toJson,
  truthy,
  UNDEFINED,
  Unsupported,
  unsupported,
} from './template-values';

export { Unsupported } from './template-values';

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

function forLoop(node: TemplateNode): Render {
  const loopvar = node['loopvar'] as TemplateNode;
  const iterableNode = node['iterable'] as TemplateNode;
  // A loop variable named `namespace` is shadowed in inner scopes by the interpreter's own: left to it.
  if (loopvar.type !== 'Identifier' || iterableNode.type === 'SelectExpression' || loopvar['value'] === 'namespace')
    return unsupported();
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
      const previous = i > 0 ? orUndefined(items[i - 1]) : UNDEFINED;
      const next = i < items.length - 1 ? orUndefined(items[i + 1]) : UNDEFINED;
      scope.vars.set('loop', new LoopState(i, items.length, previous, next));
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
    // A name given twice is the interpreter's error.
    if (new Set(fields.map((field) => field.name)).size !== fields.length) return unsupported();
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
