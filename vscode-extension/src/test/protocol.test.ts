import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { describeError, inlineParams, isCancellation, mapInlineResult, parseRange, toProtocolTriggerKind } from '../protocol';

const range = { start: { line: 1, character: 4 }, end: { line: 1, character: 9 } };

describe('inline completion params', () => {
    it('maps vscode trigger kinds (0-based) to LSP (1-based)', () => {
        assert.equal(toProtocolTriggerKind(0), 1); // Invoke → Invoked
        assert.equal(toProtocolTriggerKind(1), 2); // Automatic → Automatic
    });

    it('builds the LSP 3.18 params, copying plain positions', () => {
        const params = inlineParams('file:///a.py', { line: 3, character: 7 }, 1);
        assert.deepStrictEqual(params, {
            textDocument: { uri: 'file:///a.py' },
            position: { line: 3, character: 7 },
            context: { triggerKind: 2 },
        });
        assert.ok(!('selectedCompletionInfo' in params.context));
    });

    it('forwards the selected suggestion', () => {
        const params = inlineParams('file:///a.py', { line: 1, character: 9 }, 0, { range, text: 'append' });
        assert.deepStrictEqual(params.context, { triggerKind: 1, selectedCompletionInfo: { range, text: 'append' } });
    });
});

describe('inline completion result', () => {
    it('accepts an item array', () => {
        assert.deepStrictEqual(mapInlineResult([{ insertText: 'return a + b' }]), [{ text: 'return a + b', snippet: false }]);
    });

    it('accepts {items} and keeps ranges and filter text', () => {
        assert.deepStrictEqual(mapInlineResult({ items: [{ insertText: 'self.x', range, filterText: 'self' }] }), [
            { text: 'self.x', snippet: false, range, filterText: 'self' },
        ]);
    });

    it('accepts snippet StringValues', () => {
        assert.deepStrictEqual(mapInlineResult([{ insertText: { kind: 'snippet', value: 'f(${1:x})' } }]), [
            { text: 'f(${1:x})', snippet: true },
        ]);
    });

    it('null and undefined mean no completion', () => {
        assert.deepStrictEqual(mapInlineResult(null), []);
        assert.deepStrictEqual(mapInlineResult(undefined), []);
        assert.deepStrictEqual(mapInlineResult({ items: [] }), []);
    });

    it('drops malformed and empty items but keeps the rest', () => {
        const items = mapInlineResult([
            { insertText: '' },
            { insertText: 3 },
            { insertText: { kind: 'plaintext', value: 'x' } },
            { text: 'wrong field' },
            null,
            { insertText: 'bad range', range: { start: { line: 0, character: 2 }, end: { line: 0, character: 1 } } },
            { insertText: 'bad position', range: { start: { line: -1, character: 0 }, end: { line: 0, character: 0 } } },
            { insertText: 'ok', range: null },
        ]);
        assert.deepStrictEqual(items, [{ text: 'ok', snippet: false }]);
    });

    it('rejects a result of the wrong shape', () => {
        assert.throws(() => mapInlineResult('completion'), TypeError);
        assert.throws(() => mapInlineResult({ item: [] }), TypeError);
    });

    it('parses ranges strictly', () => {
        assert.deepStrictEqual(parseRange(range), range);
        assert.equal(parseRange({ start: { line: 0, character: 1.5 }, end: { line: 0, character: 2 } }), undefined);
        assert.equal(parseRange({ start: { line: 0 }, end: { line: 0, character: 2 } }), undefined);
    });
});

describe('errors', () => {
    it('recognizes request cancellation by client and server', () => {
        assert.equal(isCancellation({ code: -32800, message: 'Request cancelled' }), true);
        assert.equal(isCancellation({ code: -32802, message: 'Server cancelled' }), true);
        assert.equal(isCancellation({ code: -32603, message: 'internal' }), false);
        assert.equal(isCancellation(new Error('x')), false);
    });

    it('describes errors by message and code only', () => {
        assert.equal(describeError({ code: -32603, message: 'cloud unreachable', data: { prompt: 'secret' } }), 'cloud unreachable (code -32603)');
        assert.equal(describeError(new Error('boom')), 'boom');
        assert.equal(describeError('text'), 'text');
    });
});
