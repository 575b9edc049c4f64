// Debounce and cancellation of completion requests, independent of VS Code; the adaptive
// debounce (from measured latencies) at the end.
//
// VS Code cancels the token of the previous inline-completion request as soon as the user
// types again. So a request first waits `debounceMs` on its own token: if it is cancelled
// meanwhile, nothing is sent at all. Otherwise the same token goes to the language client,
// which turns a later cancellation into `$/cancelRequest` for the in-flight request.

/** The shape shared by vscode.CancellationToken and vscode-jsonrpc's CancellationToken. */
export interface CancellationLike {
    readonly isCancellationRequested: boolean;
    onCancellationRequested(listener: (e: unknown) => unknown): { dispose(): unknown };
}

/** Resolves true after `ms` milliseconds, or false as soon as `token` is cancelled. */
export function sleep(ms: number, token: CancellationLike): Promise<boolean> {
    if (token.isCancellationRequested) {
        return Promise.resolve(false);
    }
    if (ms <= 0) {
        return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
            subscription.dispose();
            resolve(true);
        }, ms);
        const subscription = token.onCancellationRequested(() => {
            clearTimeout(timer);
            subscription.dispose();
            resolve(false);
        });
    });
}

/** Sends a request, forwarding the cancellation token. */
export type Send<P, R> = (params: P, token: CancellationLike) => Promise<R>;

/** Waits `debounceMs`, then sends `params()` with `token`. Resolves undefined when the request
 * was cancelled at any point (before sending, or while in flight — whether the server answered
 * with a result or with a cancellation error); other errors reject. `params` is a thunk so a
 * request that is debounced away costs nothing. */
export async function debouncedRequest<P, R>(
    send: Send<P, R>,
    params: () => P,
    token: CancellationLike,
    debounceMs: number,
    isCancellationError: (error: unknown) => boolean,
): Promise<R | undefined> {
    if (!(await sleep(debounceMs, token))) {
        return undefined;
    }
    let result: R;
    try {
        result = await send(params(), token);
    } catch (error) {
        if (token.isCancellationRequested || isCancellationError(error)) {
            return undefined;
        }
        throw error;
    }
    return token.isCancellationRequested ? undefined : result;
}

// -- adaptive debounce -------------------------------------------------------------------

/** Bounds and shape of the adaptive debounce (`umbra.debounceMs` null). */
export const ADAPTIVE = Object.freeze({ minMs: 100, maxMs: 1000, window: 8, factor: 0.5 });

/** The debounce for measured latencies (ms, oldest first): `factor` × the median of the last
 * `window`, clamped to [minMs, maxMs]; minMs before anything was measured. A request the next
 * keystroke cancels costs the cloud work done so far; the slower completions are, the longer a
 * pause has to last before it is worth starting one. Half the typical latency keeps that wait
 * below the time the completion itself takes; the median ignores a one-off slow request (the
 * first one warms the model and the connection). */
export function adaptiveDelay(latencies: readonly number[]): number {
    const recent = latencies.slice(-ADAPTIVE.window).filter((x) => Number.isFinite(x) && x >= 0);
    if (recent.length === 0) {
        return ADAPTIVE.minMs;
    }
    const sorted = [...recent].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    const median = sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    return Math.round(Math.min(ADAPTIVE.maxMs, Math.max(ADAPTIVE.minMs, ADAPTIVE.factor * median)));
}

/** The latencies of recent completed requests and the debounce they call for. */
export class LatencyTracker {
    private readonly latencies: number[] = [];

    record(latencyMs: number): void {
        if (!Number.isFinite(latencyMs) || latencyMs < 0) {
            return;
        }
        this.latencies.push(latencyMs);
        if (this.latencies.length > ADAPTIVE.window) {
            this.latencies.shift();
        }
    }

    get samples(): readonly number[] {
        return this.latencies;
    }

    get delayMs(): number {
        return adaptiveDelay(this.latencies);
    }
}

/** The wait before a request: none when the user asked for it (trigger now, an explicit
 * invocation), else `umbra.debounceMs` when set, else the adaptive one. */
export function debounceMsFor(invoked: boolean, fixedMs: number | null, latency: LatencyTracker): number {
    if (invoked) {
        return 0;
    }
    return fixedMs ?? latency.delayMs;
}

/** `send`, recording into `latency` how long each request took that was answered and not
 * cancelled (a cancelled one says nothing about how long it would have taken). */
export function timed<P, R>(send: Send<P, R>, latency: LatencyTracker, now: () => number = () => performance.now()): Send<P, R> {
    return async (params, token) => {
        const start = now();
        const result = await send(params, token);
        if (!token.isCancellationRequested) {
            latency.record(now() - start);
        }
        return result;
    };
}
