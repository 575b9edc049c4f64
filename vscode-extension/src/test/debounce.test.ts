import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { CancellationTokenSource, ResponseError } from 'vscode-languageserver-protocol/node';
import { ADAPTIVE, CancellationLike, LatencyTracker, adaptiveDelay, debounceMsFor, debouncedRequest, sleep, timed } from '../debounce';
import { isCancellation } from '../protocol';

interface Call {
    params: string;
    token: CancellationLike;
    at: number;
}

/** A sender that records its calls and answers after `latencyMs` (or fails with `error`). */
function recordingSender(latencyMs = 0, error?: unknown) {
    const calls: Call[] = [];
    const send = (params: string, token: CancellationLike) => {
        calls.push({ params, token, at: Date.now() });
        return new Promise<string>((resolve, reject) =>
            setTimeout(() => (error === undefined ? resolve(`result of ${params}`) : reject(error)), latencyMs),
        );
    };
    return { calls, send };
}

describe('sleep', () => {
    it('resolves true after the delay', async () => {
        const start = Date.now();
        assert.equal(await sleep(30, new CancellationTokenSource().token), true);
        assert.ok(Date.now() - start >= 25);
    });

    it('resolves false as soon as the token is cancelled', async () => {
        const source = new CancellationTokenSource();
        const start = Date.now();
        setTimeout(() => source.cancel(), 10);
        assert.equal(await sleep(5000, source.token), false);
        assert.ok(Date.now() - start < 1000);
    });

    it('does not wait on an already cancelled token, nor for 0 ms', async () => {
        const source = new CancellationTokenSource();
        source.cancel();
        assert.equal(await sleep(5000, source.token), false);
        assert.equal(await sleep(0, new CancellationTokenSource().token), true);
    });
});

describe('debounced request', () => {
    it('sends once after the debounce delay, forwarding the same token', async () => {
        const { calls, send } = recordingSender();
        const source = new CancellationTokenSource();
        const start = Date.now();
        const result = await debouncedRequest(send, () => 'p1', source.token, 40, isCancellation);
        assert.equal(result, 'result of p1');
        assert.equal(calls.length, 1);
        assert.equal(calls[0].params, 'p1');
        assert.equal(calls[0].token, source.token);
        assert.ok(calls[0].at - start >= 35, 'sent before the debounce delay');
    });

    it('sends nothing when typing cancels within the delay', async () => {
        const { calls, send } = recordingSender();
        const source = new CancellationTokenSource();
        let built = 0;
        const pending = debouncedRequest(send, () => `p${++built}`, source.token, 200, isCancellation);
        setTimeout(() => source.cancel(), 10);
        assert.equal(await pending, undefined);
        assert.equal(calls.length, 0);
        assert.equal(built, 0, 'params are not even built');
    });

    it('a burst of keystrokes sends only the last request', async () => {
        const { calls, send } = recordingSender();
        let previous: CancellationTokenSource | undefined;
        const results: Promise<string | undefined>[] = [];
        for (let i = 0; i < 5; i++) {
            previous?.cancel(); // what VS Code does when a new inline request supersedes the last
            previous = new CancellationTokenSource();
            results.push(debouncedRequest(send, () => `keystroke ${i}`, previous.token, 50, isCancellation));
            await new Promise((r) => setTimeout(r, 5));
        }
        const settled = await Promise.all(results);
        assert.deepStrictEqual(settled, [undefined, undefined, undefined, undefined, 'result of keystroke 4']);
        assert.deepStrictEqual(
            calls.map((c) => c.params),
            ['keystroke 4'],
        );
    });

    it('drops a result that arrives after cancellation', async () => {
        const { calls, send } = recordingSender(50);
        const source = new CancellationTokenSource();
        const pending = debouncedRequest(send, () => 'p', source.token, 0, isCancellation);
        setTimeout(() => source.cancel(), 10);
        assert.equal(await pending, undefined);
        assert.equal(calls.length, 1);
        assert.equal(calls[0].token.isCancellationRequested, true, 'the sender saw the cancellation');
    });

    it('treats a RequestCancelled error as no result', async () => {
        const { send } = recordingSender(0, new ResponseError(-32800, 'Request cancelled'));
        const result = await debouncedRequest(send, () => 'p', new CancellationTokenSource().token, 0, isCancellation);
        assert.equal(result, undefined);
    });

    it('propagates other errors', async () => {
        const { send } = recordingSender(0, new ResponseError(-32603, 'cloud unreachable'));
        await assert.rejects(
            debouncedRequest(send, () => 'p', new CancellationTokenSource().token, 0, isCancellation),
            /cloud unreachable/,
        );
    });

    it('swallows any error once the request was cancelled', async () => {
        const { send } = recordingSender(30, new Error('connection closed'));
        const source = new CancellationTokenSource();
        const pending = debouncedRequest(send, () => 'p', source.token, 0, isCancellation);
        source.cancel();
        assert.equal(await pending, undefined);
    });
});

describe('adaptive debounce', () => {
    it('waits the minimum before anything was measured', () => {
        assert.equal(adaptiveDelay([]), 100);
        assert.equal(new LatencyTracker().delayMs, 100);
    });

    it('is half the median latency, clamped to [100, 1000] ms', () => {
        assert.deepStrictEqual([ADAPTIVE.minMs, ADAPTIVE.maxMs], [100, 1000]);
        assert.equal(adaptiveDelay([400]), 200);
        assert.equal(adaptiveDelay([300, 500, 700]), 250);
        assert.equal(adaptiveDelay([300, 500]), 200); // even count: the mean of the middle two
        assert.equal(adaptiveDelay([20, 30, 40]), 100, 'a fast server still gets the minimum');
        assert.equal(adaptiveDelay([5000, 9000, 7000]), 1000, 'a slow one never waits past the maximum');
        assert.equal(adaptiveDelay([150]), 100);
        assert.equal(adaptiveDelay([2000]), 1000);
    });

    it('follows the last measurements and ignores a one-off outlier', () => {
        const tracker = new LatencyTracker();
        tracker.record(30_000); // the first request warmed the model up
        for (let i = 0; i < 4; i++) {
            tracker.record(600);
        }
        assert.equal(tracker.delayMs, 300);
        for (let i = 0; i < ADAPTIVE.window; i++) {
            tracker.record(1400); // the server became slower
        }
        assert.equal(tracker.samples.length, ADAPTIVE.window);
        assert.equal(tracker.delayMs, 700);
    });

    it('ignores what is not a duration', () => {
        const tracker = new LatencyTracker();
        [Number.NaN, -5, Number.POSITIVE_INFINITY].forEach((x) => tracker.record(x));
        assert.deepStrictEqual(tracker.samples, []);
    });

    it('applies unless the user asked (no wait) or fixed umbra.debounceMs', () => {
        const tracker = new LatencyTracker();
        tracker.record(800);
        assert.equal(debounceMsFor(false, null, tracker), 400);
        assert.equal(debounceMsFor(false, 150, tracker), 150);
        assert.equal(debounceMsFor(false, 0, tracker), 0);
        assert.equal(debounceMsFor(true, null, tracker), 0);
        assert.equal(debounceMsFor(true, 5000, tracker), 0);
    });

    it('measures answered requests only', async () => {
        const tracker = new LatencyTracker();
        let clock = 0;
        const now = () => clock;
        const answer = timed(async (p: string) => {
            clock += 640;
            return p;
        }, tracker, now);
        assert.equal(await answer('a', new CancellationTokenSource().token), 'a');
        assert.deepStrictEqual(tracker.samples, [640]);

        const cancelled = new CancellationTokenSource();
        const late = timed(async (p: string) => {
            clock += 90;
            cancelled.cancel();
            return p;
        }, tracker, now);
        await late('b', cancelled.token);
        const failing = timed(async () => {
            clock += 90;
            throw new ResponseError(-32603, 'cloud unreachable');
        }, tracker, now);
        await assert.rejects(failing('c', new CancellationTokenSource().token), /cloud unreachable/);
        assert.deepStrictEqual(tracker.samples, [640], 'neither a cancelled nor a failed request counts');
    });
});
