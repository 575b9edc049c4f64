// End to end against the REAL language server: the command built by server.ts, the
// initializationOptions built by settings.ts, the request/cancellation path of debounce.ts and
// the result mapping of protocol.ts, over stdio. With `cloud.url` null the server starts the
// real cloud service on loopback itself, so a completion crosses the real wire.

import { strict as assert } from 'node:assert';
import { createServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { CancellationTokenSource } from 'vscode-languageserver-protocol/node';
import { CancellationLike, debouncedRequest } from '../debounce';
import {
    INLINE_COMPLETION_METHOD,
    InlineCompletionParams,
    inlineParams,
    isCancellation,
    mapInlineResult,
} from '../protocol';
import { settingsChange, toInitializationOptions } from '../settings';
import { StatusTracker } from '../statusModel';
import {
    RunningServer,
    removeBuiltModel,
    serverCommandSettings,
    startServer,
    testModelDir,
    testSettings,
} from './lspHarness';

// Model loading, a self-started cloud and CPU decoding on a busy 2-core machine: be patient.
const READY_MS = 300_000;
const REQUEST_TEST_MS = 600_000;

after(removeBuiltModel);

const URI = 'file:///tmp/umbra-extension-test/example.py';
const TEXT = 'def add(a, b):\n    return a + b\n\n\ndef greet(name):\n    message = \n';
const CURSOR = { line: 5, character: 14 }; // after "message = "

function completionSettings(extra: Record<string, unknown> = {}) {
    return testSettings({
        ...serverCommandSettings(),
        'model.dir': testModelDir(),
        'completion.maxTokens': 8,
        'completion.contextTokens': 256,
        threads: 1,
        ...extra,
    });
}

function openDocument(server: RunningServer, text = TEXT): Promise<void> {
    return server.connection.sendNotification('textDocument/didOpen', {
        textDocument: { uri: URI, languageId: 'python', version: 1, text },
    });
}

/** The server's textDocumentSync kind (1 full, 2 incremental). */
function syncKind(server: RunningServer): number {
    const sync = server.initializeResult.capabilities.textDocumentSync;
    return typeof sync === 'number' ? sync : sync?.change ?? 0;
}

/** The extension's request path minus VS Code: debounce, forwarded token, result mapping. */
async function inline(server: RunningServer, token: CancellationLike, triggerKind = 1, debounceMs = 0) {
    const params = (): InlineCompletionParams => inlineParams(URI, CURSOR, triggerKind);
    const result = await debouncedRequest(
        (p, t) => server.connection.sendRequest(INLINE_COMPLETION_METHOD, p, t as CancellationTokenSource['token']),
        params,
        token,
        debounceMs,
        isCancellation,
    );
    return result === undefined ? undefined : mapInlineResult(result);
}

describe('the real Umbra language server', { timeout: REQUEST_TEST_MS }, () => {
    let server: RunningServer | undefined;

    before(async () => {
        server = await startServer(completionSettings());
    });

    after(() => server?.kill());

    it('advertises inline and classic completion', () => {
        const capabilities = server!.initializeResult.capabilities as Record<string, unknown>;
        assert.ok(capabilities.inlineCompletionProvider, `no inlineCompletionProvider in ${JSON.stringify(capabilities)}`);
        assert.ok(capabilities.completionProvider, 'no completionProvider');
        assert.ok(capabilities.textDocumentSync !== undefined, 'no textDocumentSync');
    });

    it('reports ready over umbra/status, in split mode', async () => {
        const ready = await server!.waitForStatus((s) => s.state === 'ready', READY_MS);
        assert.equal(ready.mode, 'split');
        // No bundle, so no access key: SecureGate reports secure (parsed, so the item shows a lock).
        assert.deepStrictEqual(ready.access, { kind: 'secure' }, JSON.stringify(server!.statuses));
        assert.ok(!server!.statuses.some((s) => s.state === 'unreachable' || s.state === 'error'), JSON.stringify(server!.statuses));
    });

    it('answers textDocument/inlineCompletion with items', async () => {
        await openDocument(server!);
        const items = await inline(server!, new CancellationTokenSource().token, 1);
        assert.ok(items !== undefined);
        assert.ok(items.length >= 1, `no inline items; server log:\n${server!.log()}`);
        for (const item of items) {
            assert.equal(typeof item.text, 'string');
            assert.ok(item.text.length > 0);
            assert.ok(!item.text.includes('\n'), 'single-line completion by default');
        }
    });

    it('answers an automatic trigger after an edit (didChange)', async () => {
        // Like vscode-languageclient: a ranged edit under incremental sync, else the full text.
        const inserted = '"hello " + ';
        const change =
            syncKind(server!) === 2
                ? { range: { start: CURSOR, end: CURSOR }, text: inserted }
                : { text: TEXT.replace('message = ', `message = ${inserted}`) };
        await server!.connection.sendNotification('textDocument/didChange', {
            textDocument: { uri: URI, version: 2 },
            contentChanges: [change],
        });
        const cursor = { line: 5, character: 25 };
        const result = await server!.connection.sendRequest(INLINE_COMPLETION_METHOD, inlineParams(URI, cursor, 1));
        assert.doesNotThrow(() => mapInlineResult(result));
    });

    it('cancels an in-flight request with $/cancelRequest and keeps serving', async () => {
        const source = new CancellationTokenSource();
        const pending = inline(server!, source.token, 0);
        // Let the request go out, then cancel it like VS Code does on the next keystroke.
        await new Promise((r) => setImmediate(r));
        source.cancel();
        assert.equal(await pending, undefined);
        const sent = server!.sent;
        assert.deepStrictEqual(sent.slice(-2), [INLINE_COMPLETION_METHOD, '$/cancelRequest'], sent.join(', '));
        const items = await inline(server!, new CancellationTokenSource().token, 0);
        assert.ok(items !== undefined && items.length >= 1, 'the server still answers after a cancellation');
    });

    it('a request cancelled during the debounce never reaches the server', async () => {
        const sentBefore = server!.sent.length;
        const source = new CancellationTokenSource();
        const pending = inline(server!, source.token, 1, 5_000);
        setTimeout(() => source.cancel(), 20);
        assert.equal(await pending, undefined);
        assert.deepStrictEqual(server!.sent.slice(sentBefore), [], 'neither the request nor a cancellation was sent');
    });

    it('answers textDocument/completion', async () => {
        const result = await server!.connection.sendRequest('textDocument/completion', {
            textDocument: { uri: URI },
            position: CURSOR,
            context: { triggerKind: 1 },
        });
        const items = Array.isArray(result) ? result : (result as { items?: unknown[] } | null)?.items ?? [];
        assert.ok(Array.isArray(items));
    });

    it('takes a changed completion setting as the extension sends it, without setting up again', async () => {
        const before = completionSettings();
        const after = completionSettings({ 'completion.maxTokens': 1 });
        assert.equal(settingsChange(before, after), 'reconfigure');
        const starts = server!.statuses.filter((s) => s.state === 'starting').length;
        const generated = async (): Promise<number> => {
            const result = await server!.connection.sendRequest('textDocument/completion', {
                textDocument: { uri: URI }, position: CURSOR, context: { triggerKind: 1 },
            });
            const items = (result as { items?: { data?: { generatedTokens?: number } }[] } | null)?.items ?? [];
            return items[0]?.data?.generatedTokens ?? 0;
        };
        await server!.connection.sendNotification('workspace/didChangeConfiguration', { settings: toInitializationOptions(after) });
        const one = await generated();
        await server!.connection.sendNotification('workspace/didChangeConfiguration', { settings: toInitializationOptions(before) });
        const more = await generated();
        assert.ok(one <= 1 && more > 1, `generated ${one} then ${more} tokens; server log:\n${server!.log()}`);
        assert.equal(server!.statuses.filter((s) => s.state === 'starting').length, starts, JSON.stringify(server!.statuses));
    });

    it('shuts down cleanly', async () => {
        await server!.connection.sendNotification('textDocument/didClose', { textDocument: { uri: URI } });
        assert.equal(await server!.shutdown(60_000), 0);
        server = undefined;
    });
});

/** A loopback port with nothing listening on it. */
async function closedPort(): Promise<number> {
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as { port: number };
    await new Promise<void>((r) => probe.close(() => r()));
    return port;
}

describe('the real server with its cloud unreachable', { timeout: REQUEST_TEST_MS }, () => {
    let server: RunningServer | undefined;

    after(() => server?.kill());

    it('says so over umbra/status, returns nothing and falls back to nothing', async () => {
        const url = `http://127.0.0.1:${await closedPort()}`;
        server = await startServer(
            completionSettings({
                'cloud.url': url,
                'cloud.tokenEnv': 'UMBRA_EXTENSION_TEST_TOKEN',
                // a service no keyring holds an entry for: the token comes from the environment
                'model.keyringService': 'umbra-extension-test',
            }),
            { UMBRA_EXTENSION_TEST_TOKEN: 'test-token-for-a-closed-port' },
        );
        await openDocument(server);
        // The outage shows either at start-up or on the first request; ask for a completion
        // (errors are allowed here, items are not).
        let items: unknown[] | undefined;
        try {
            items = await inline(server, new CancellationTokenSource().token, 0);
        } catch {
            items = [];
        }
        const unreachable = await server.waitForStatus((s) => s.state === 'unreachable', READY_MS);
        assert.equal(unreachable.mode, 'split', 'the mode stays split: no fallback');
        assert.deepStrictEqual(items ?? [], [], 'no completion may come from anywhere while the cloud is down');
        assert.equal(server.statuses[server.statuses.length - 1].state, 'unreachable', JSON.stringify(server.statuses));

        // What the extension makes of it: one warning for the whole outage.
        const tracker = new StatusTracker();
        const warnings = server.statuses.map((s) => tracker.onStatus(s).warning).filter((w) => w !== undefined);
        assert.equal(warnings.length, 1);

        assert.equal(await server.shutdown(60_000), 0);
        server = undefined;
    });
});
