import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { CancellationTokenSource } from 'vscode-languageserver-protocol/node';
import { CancellationLike, LatencyTracker } from '../debounce';
import { DEFAULT_EXCLUDE, Exclusions } from '../exclusions';
import { InlineState, InlineTarget, blocker, describeBlocker, requestInline } from '../inlineRequest';
import { InlineCompletionParams } from '../protocol';

function state(overrides: Partial<InlineState> = {}): InlineState {
    return {
        enabled: true,
        running: true,
        languages: ['python', 'go'],
        exclusions: new Exclusions(DEFAULT_EXCLUDE, ['/ws'], 'linux'),
        debounceMs: null,
        latency: new LatencyTracker(),
        ...overrides,
    };
}

function target(fsPath = '/ws/main.py', languageId = 'python', vscodeTriggerKind = 1): InlineTarget {
    return {
        uri: { scheme: 'file', fsPath },
        protocolUri: `file://${fsPath}`,
        languageId,
        position: { line: 1, character: 4 },
        vscodeTriggerKind,
    };
}

/** A sender that records what reaches it and answers one item after `latencyMs`. */
function sender(latencyMs = 0) {
    const sent: { params: InlineCompletionParams; at: number }[] = [];
    const send = (params: InlineCompletionParams, _token: CancellationLike) => {
        sent.push({ params, at: Date.now() });
        return new Promise<unknown>((r) => setTimeout(() => r({ items: [{ insertText: 'x + 1' }] }), latencyMs));
    };
    return { sent, send };
}

describe('what blocks a completion request', () => {
    it('nothing, for an open Python file of the workspace', () => {
        assert.equal(blocker(state(), target()), undefined);
    });

    it('the toggle, a stopped server, the language, an exclusion — in that order', () => {
        assert.deepStrictEqual(blocker(state({ enabled: false, running: false }), target('/ws/.env')), { kind: 'disabled' });
        assert.deepStrictEqual(blocker(state({ running: false }), target()), { kind: 'stopped' });
        assert.deepStrictEqual(blocker(state(), target('/ws/a.java', 'java')), { kind: 'language', languageId: 'java' });
        assert.deepStrictEqual(blocker(state(), target('/ws/certs/tls.key')), { kind: 'excluded', glob: '**/*.key' });
        assert.deepStrictEqual(blocker(state(), target('/ws/.env', 'python')), { kind: 'excluded', glob: '**/.env' });
    });

    it('is explained to the user', () => {
        assert.match(describeBlocker({ kind: 'disabled' }), /Toggle Completions/);
        assert.match(describeBlocker({ kind: 'stopped' }), /Restart Server/);
        assert.match(describeBlocker({ kind: 'language', languageId: 'rust' }), /rust .*umbra\.languages/);
        assert.match(describeBlocker({ kind: 'excluded', glob: '**/.env' }), /"\*\*\/\.env" \(umbra\.exclude\).*never sent/);
    });
});

describe('one inline completion request', () => {
    it('sends nothing at all while blocked, even when invoked explicitly', async () => {
        const { sent, send } = sender();
        const token = new CancellationTokenSource().token;
        for (const [s, t] of [
            [state({ enabled: false }), target()],
            [state({ running: false }), target()],
            [state(), target('/ws/a.java', 'java', 0)],
            [state(), target('/ws/server.pem', 'python', 0)],
            [state(), target('/ws/.env.local', 'python', 1)],
        ] as const) {
            assert.equal(await requestInline(send, t, s, token), undefined);
        }
        assert.deepStrictEqual(sent, []);
    });

    it('an explicit invocation (trigger now) does not wait for a fixed debounce', async () => {
        const { sent, send } = sender();
        const start = Date.now();
        const items = await requestInline(send, target('/ws/main.py', 'python', 0), state({ debounceMs: 5000 }), new CancellationTokenSource().token);
        assert.deepStrictEqual(items, [{ text: 'x + 1', snippet: false }]);
        assert.equal(sent.length, 1);
        assert.ok(sent[0].at - start < 1000, `sent after ${sent[0].at - start} ms`);
        assert.equal(sent[0].params.context.triggerKind, 1, 'LSP Invoked');
    });

    it('typing waits for the debounce, and its latency adapts the next one', async () => {
        const { sent, send } = sender(300);
        const s = state();
        const start = Date.now();
        await requestInline(send, target(), s, new CancellationTokenSource().token);
        assert.ok(sent[0].at - start >= 95, `sent after ${sent[0].at - start} ms: the first wait is the minimum`);
        assert.equal(sent[0].params.context.triggerKind, 2, 'LSP Automatic');
        assert.equal(s.latency.samples.length, 1);
        assert.ok(s.latency.samples[0] >= 290, String(s.latency.samples));
        assert.ok(s.latency.delayMs >= 145 && s.latency.delayMs <= 250, String(s.latency.delayMs));
    });

    it('typing again within the debounce sends nothing', async () => {
        const { sent, send } = sender();
        const source = new CancellationTokenSource();
        const pending = requestInline(send, target(), state({ debounceMs: 2000 }), source.token);
        setTimeout(() => source.cancel(), 20);
        assert.equal(await pending, undefined);
        assert.deepStrictEqual(sent, []);
    });
});
