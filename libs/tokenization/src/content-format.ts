/**
 * vLLM's `--chat-template-content-format auto`: does the template read a message's content as a string, or
 * iterate it as OpenAI parts (`{% for part in message['content'] %}`)? Read from the template's syntax tree,
 * as vLLM does it (vllm/renderers/hf.py `_detect_content_format` and the `_iter_nodes_*` helpers):
 *
 * 1. the names bound to `messages`: `messages` itself, and every `{% set x = <messages or its slice/filter/test> %}`,
 *    transitively;
 * 2. the loop variables of `{% for m in <one of those> %}`;
 * 3. 'openai' when some `{% for p in <m>.content %}` (or `m['content']`, sliced or filtered) exists, else 'string'.
 *
 * A template the parser cannot read counts as 'string' (vLLM's default for auto).
 */

import { parse, tokenize } from '@huggingface/jinja';

export type ContentFormat = 'string' | 'openai';

interface Node {
  type: string;
  [field: string]: unknown;
}

function isNode(value: unknown): value is Node {
  return typeof value === 'object' && value !== null && typeof (value as { type?: unknown }).type === 'string';
}

/** Every node of a tree, depth first (children are the node-valued fields and arrays of nodes). */
function* walk(node: Node): Generator<Node> {
  yield node;
  for (const value of Object.values(node)) {
    if (Array.isArray(value)) {
      for (const item of value) if (isNode(item)) yield* walk(item);
    } else if (isNode(value)) yield* walk(value);
  }
}

function isVarAccess(node: unknown, name: string): boolean {
  return isNode(node) && node.type === 'Identifier' && node['value'] === name;
}

/** `name.key` or `name['key']`. */
function isAttrAccess(node: Node, name: string, key: string): boolean {
  if (node.type !== 'MemberExpression' || !isVarAccess(node['object'], name)) return false;
  const property = node['property'];
  if (!isNode(property)) return false;
  if (node['computed'] === true) return property.type === 'StringLiteral' && property['value'] === key;
  return property.type === 'Identifier' && property['value'] === key;
}

/** The variable (or its `key` field), possibly filtered, tested or sliced. */
function isVarOrElemsAccess(node: unknown, name: string, key?: string): boolean {
  if (!isNode(node)) return false;
  if (node.type === 'FilterExpression' || node.type === 'TestExpression')
    return isVarOrElemsAccess(node['operand'], name, key);
  if (node.type === 'SelectExpression') return isVarOrElemsAccess(node['lhs'], name, key);
  if (node.type === 'MemberExpression' && node['computed'] === true && isNode(node['property'])) {
    if ((node['property'] as Node).type === 'SliceExpression') return isVarOrElemsAccess(node['object'], name, key);
  }
  return key === undefined ? isVarAccess(node, name) : isAttrAccess(node, name, key);
}

/** `name` and every variable set from it, transitively. */
function aliasesOf(nodes: readonly Node[], name: string): Set<string> {
  const names = new Set([name]);
  const queue = [name];
  while (queue.length > 0) {
    const current = queue.shift() as string;
    for (const node of nodes) {
      if (node.type !== 'Set' || !isVarOrElemsAccess(node['value'], current)) continue;
      const assignee = node['assignee'];
      if (isNode(assignee) && assignee.type === 'Identifier' && !names.has(assignee['value'] as string)) {
        names.add(assignee['value'] as string);
        queue.push(assignee['value'] as string);
      }
    }
  }
  return names;
}

/** Loop variables of for-loops whose iterable is one of `sources` (or its `key` field). */
function loopVariables(nodes: readonly Node[], sources: Iterable<string>, key?: string): Set<string> {
  const found = new Set<string>();
  const names = [...sources];
  for (const node of nodes) {
    if (node.type !== 'For') continue;
    const loopvar = node['loopvar'];
    if (!isNode(loopvar) || loopvar.type !== 'Identifier') continue;
    if (names.some((name) => isVarOrElemsAccess(node['iterable'], name, key))) found.add(loopvar['value'] as string);
  }
  return found;
}

export function detectContentFormat(template: string): ContentFormat {
  let nodes: Node[];
  try {
    nodes = [...walk(parse(tokenize(template, { lstrip_blocks: true, trim_blocks: true })) as unknown as Node)];
  } catch {
    return 'string';
  }
  const messageVariables = loopVariables(nodes, aliasesOf(nodes, 'messages'));
  return loopVariables(nodes, messageVariables, 'content').size > 0 ? 'openai' : 'string';
}
