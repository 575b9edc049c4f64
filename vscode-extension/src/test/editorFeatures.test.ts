// The editor-side features against the REAL language server (and the real CLI), with the
// extension's own code on the path: exclusions through the client's document-sync middleware
// (exclusions.ts), the request checks, trigger-now and the adaptive debounce (inlineRequest.ts,
// debounce.ts), the editor's cancellation reaching the server, the privacy in the status item
// (statusModel.ts) and the security report's CLI run (securityReport.ts). VS Code itself is the
// one part not present: its events are played by calling the same middleware and functions.

import { strict as assert } from 'node:assert';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CancellationTokenSource, ResponseError } from 'vscode-languageserver-protocol/node';
import { CancellationLike, LatencyTracker } from '../debounce';
import { Exclusions, UriLike, syncMiddleware } from '../exclusions';
import { InlineState, InlineTarget, requestInline } from '../inlineRequest';
import { INLINE_COMPLETION_METHOD, InlineCompletionParams, inlineParams } from '../protocol';
import { reportArgv, runCli } from '../securityReport';
import { viewOf } from '../statusModel';
import { REPO, RunningServer, removeBuiltModel, serverCommandSettings, startServer, testModelDir, testSettings } from './lspHarness';

const READY_MS = 300_000;
const TEST_MS = 600_000;

after(removeBuiltModel);

const DIR = '/tmp/umbra-extension-features';
const TEXT = 'def add(a, b):\n    return a + b\n\n\ndef greet(name):\n    message = \n';
const CURSOR = { line: 5, character: 14 };

/** An editor document as the client's middleware sees it (a vscode.TextDocument has these). */
interface Doc {
    uri: UriLike;
    protocolUri: string;
    languageId: string;
    version: number;
    text: string;
}

function doc(name: string): Doc {
    const fsPath = `${DIR}/${name}`;
    // python on purpose: e.g. `files.associations` made a secret file look like code
    return { uri: { scheme: 'file', fsPath }, protocolUri: `file://${fsPath}`, languageId: 'python', version: 1, text: TEXT };
}

const settings = testSettings({
    ...serverCommandSettings(),
    'model.dir': testModelDir(),
    'completion.maxTokens': 48,
    'completion.multiline': true,
    'completion.contextTokens': 256,
    // no inline deadline: on a loaded machine 250 ms can cut the decode to nothing; these tests
    // assert the path, not its speed (benchmarks/ does)
    'inline.deadlineMs': 0,
    threads: 1,
});

describe('editor features against the real Umbra language server', { timeout: TEST_MS }, () => {
    let server: RunningServer | undefined;
    const exclusions = new Exclusions(settings.exclude, [DIR]);
    const middleware = syncMiddleware(exclusions);
    const latency = new LatencyTracker();
    const state = (overrides: Partial<InlineState> = {}): InlineState => ({
        enabled: true,
        running: true,
        languages: settings.languages,
        exclusions,
        debounceMs: settings.debounceMs,
        latency,
        ...overrides,
    });
    /** What the extension sends through the client; raw answers and errors are kept. */
    const answers: { result?: unknown; error?: unknown }[] = [];
    const send = (p: InlineCompletionParams, token: CancellationLike) =>
        server!.connection.sendRequest(INLINE_COMPLETION_METHOD, p, token as CancellationTokenSource['token']).then(
            (result) => (answers.push({ result }), result),
            (error: unknown) => {
                answers.push({ error });
                throw error;
            },
        );
    const target = (d: Doc, vscodeTriggerKind: number): InlineTarget => ({
        uri: d.uri,
        protocolUri: d.protocolUri,
        languageId: d.languageId,
        position: CURSOR,
        vscodeTriggerKind,
    });

    /** Plays VS Code opening, editing, saving and closing `d` through the client's middleware. */
    async function open(d: Doc): Promise<void> {
        await middleware.didOpen(d, (x) =>
            server!.connection.sendNotification('textDocument/didOpen', {
                textDocument: { uri: x.protocolUri, languageId: x.languageId, version: x.version, text: x.text },
            }),
        );
    }
    async function editSaveClose(d: Doc): Promise<void> {
        const event = { document: d, contentChanges: [{ range: { start: CURSOR, end: CURSOR }, text: 'name' }] };
        await middleware.didChange(event, (e) =>
            server!.connection.sendNotification('textDocument/didChange', {
                textDocument: { uri: e.document.protocolUri, version: 2 },
                contentChanges: e.contentChanges,
            }),
        );
        await middleware.didSave(d, (x) => server!.connection.sendNotification('textDocument/didSave', { textDocument: { uri: x.protocolUri } }));
        await middleware.didClose(d, (x) => server!.connection.sendNotification('textDocument/didClose', { textDocument: { uri: x.protocolUri } }));
    }

    before(async () => {
        server = await startServer(settings);
    });

    after(() => server?.kill());

    it('shows the privacy the server reports in the status item', async () => {
        const ready = await server!.waitForStatus((s) => s.state === 'ready', READY_MS);
        // no bundle, through the self-started loopback cloud: what the attack tables say of that
        assert.equal(ready.privacy, 'none · cloud reads ~99.9 % of tokens', JSON.stringify(ready));
        assert.equal(viewOf(ready).text, '$(check) Umbra $(shield) none · cloud reads ~99.9 % of tokens $(lock)');
        assert.equal(ready.privacyDetails?.defended, false);
        assert.match(viewOf(ready).tooltip, /Attacks \(tokens recovered\): \(a\) nearest neighbour 99\.9 %/);
    });

    it('never syncs an excluded file and never asks to complete it', async () => {
        const secret = doc('.env');
        const key = doc('deploy/server.key');
        const code = doc('main.py');
        assert.ok(exclusions.isExcluded(secret.uri) && exclusions.isExcluded(key.uri) && !exclusions.isExcluded(code.uri));
        const before = server!.sent.length;
        for (const d of [secret, key]) {
            await open(d);
            assert.equal(await requestInline(send, target(d, 0), state(), new CancellationTokenSource().token), undefined);
            assert.equal(await requestInline(send, target(d, 1), state(), new CancellationTokenSource().token), undefined);
            await editSaveClose(d);
        }
        assert.deepStrictEqual(server!.sent.slice(before), [], 'nothing about an excluded file left the client');

        // The server's side: it has never heard of them. Asked directly (as a client without
        // the exclusions would), it answers that the document is not open.
        for (const d of [secret, key]) {
            await assert.rejects(
                server!.connection.sendRequest(INLINE_COMPLETION_METHOD, inlineParams(d.protocolUri, CURSOR, 0)),
                (e: ResponseError<unknown>) => /is not open/.test(e.message),
            );
        }

        // The same path serves a file that is not excluded.
        await open(code);
        const items = await requestInline(send, target(code, 0), state(), new CancellationTokenSource().token);
        assert.ok(items !== undefined && items.length >= 1, `no completion for main.py; server log:\n${server!.log()}`);
    });

    it('sends nothing while toggled off or stopped', async () => {
        const before = server!.sent.length;
        for (const s of [state({ enabled: false, running: false }), state({ running: false })]) {
            assert.equal(await requestInline(send, target(doc('main.py'), 0), s, new CancellationTokenSource().token), undefined);
            assert.equal(await requestInline(send, target(doc('main.py'), 1), s, new CancellationTokenSource().token), undefined);
        }
        assert.deepStrictEqual(server!.sent.slice(before), []);
    });

    it('trigger now goes out at once, typing waits for the debounce', async () => {
        const slow = state({ debounceMs: 400 });
        let start = Date.now();
        const now = requestInline(send, target(doc('main.py'), 0), slow, new CancellationTokenSource().token);
        await new Promise((r) => setTimeout(r, 50));
        assert.equal(server!.sent.at(-1), INLINE_COMPLETION_METHOD, 'invoked: sent within 50 ms');
        assert.ok((await now)!.length >= 1);

        const before = server!.sent.length;
        start = Date.now();
        const typed = requestInline(send, target(doc('main.py'), 1), slow, new CancellationTokenSource().token);
        await new Promise((r) => setTimeout(r, 250));
        assert.equal(server!.sent.length, before, 'automatic: nothing sent during the debounce');
        await typed;
        assert.deepStrictEqual(server!.sent.slice(before), [INLINE_COMPLETION_METHOD]);
        assert.ok(Date.now() - start >= 400);
    });

    it('adapts the debounce to the measured latency, within [100, 1000] ms', async () => {
        for (let i = 0; i < 3; i++) {
            await requestInline(send, target(doc('main.py'), 0), state(), new CancellationTokenSource().token);
        }
        assert.ok(latency.samples.length >= 3, String(latency.samples));
        const sorted = [...latency.samples].sort((a, b) => a - b);
        const median = sorted.length % 2 ? sorted[sorted.length >> 1] : (sorted[sorted.length / 2 - 1] + sorted[sorted.length / 2]) / 2;
        assert.equal(latency.delayMs, Math.round(Math.min(1000, Math.max(100, median / 2))), String(latency.samples));
    });

    it("the editor's cancellation reaches the server, which cancels the running request", async () => {
        const source = new CancellationTokenSource();
        const before = server!.sent.length;
        answers.length = 0;
        const pending = requestInline(send, target(doc('main.py'), 1), state({ debounceMs: 0 }), source.token);
        while (server!.sent.length === before) {
            await new Promise((r) => setImmediate(r));
        }
        source.cancel(); // what VS Code does on the next keystroke
        assert.equal(await pending, undefined);
        assert.deepStrictEqual(server!.sent.slice(before), [INLINE_COMPLETION_METHOD, '$/cancelRequest']);
        // The answer comes from the server's cancellation of that request (pygls's wording).
        const [answer] = answers;
        assert.ok(answer.error instanceof ResponseError, `the server answered ${JSON.stringify(answer)}`);
        assert.equal(answer.error.code, -32800);
        assert.match(answer.error.message, /Request with id "?\d+"? is canceled/);
        // and it keeps serving
        const items = await requestInline(send, target(doc('main.py'), 0), state(), new CancellationTokenSource().token);
        assert.ok(items !== undefined && items.length >= 1);
    });

    it('shuts down cleanly', async () => {
        assert.equal(await server!.shutdown(60_000), 0);
        server = undefined;
    });
});

describe('the security report command line, run for real', { timeout: TEST_MS }, () => {
    it('runs `umbra audit report` and passes its one-line reason on when there is nothing to report', async () => {
        const dir = mkdtempSync(join(tmpdir(), 'umbra-ext-audit-'));
        try {
            const out = join(dir, 'report.html');
            const lines: string[] = [];
            const outcome = await runCli(reportArgv(settings.server, out, 1), {
                cwd: REPO,
                env: { ...process.env, UMBRA_AUDIT_DIR: join(dir, 'audit') },
                onLine: (l) => lines.push(l),
            });
            assert.equal(outcome.code, 2, JSON.stringify(outcome));
            assert.equal(outcome.cancelled, false);
            assert.match(outcome.lastLine, /no audit recordings in .*umbra audit on/);
            assert.ok(lines.some((l) => /no audit recordings/.test(l)));
            assert.equal(existsSync(out), false);
        } finally {
            rmSync(dir, { recursive: true, force: true });
        }
    });
});
