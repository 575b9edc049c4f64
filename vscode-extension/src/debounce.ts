// Debounce and cancellation of completion requests, independent of VS Code.
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
