// Whether and how one inline completion is asked for: the checks every request passes (server
// running, language, exclusions), the debounce (none when invoked, fixed, or adaptive) and the
// request itself with the editor's cancellation token forwarded to the server.
//
// Pure: no `vscode` import. inline.ts adapts VS Code's provider call to it and the "Trigger
// Completion Now" command uses `blocker` to say why nothing would happen.

import { CancellationLike, LatencyTracker, Send, debounceMsFor, debouncedRequest, timed } from './debounce';
import { Exclusions, UriLike } from './exclusions';
import { InlineCompletionParams, InlineItem, Position, Range, inlineParams, isCancellation, mapInlineResult } from './protocol';

/** The document and place a completion is asked for. */
export interface InlineTarget {
    /** The document's URI as decided on (exclusions). */
    uri: UriLike;
    /** The same URI as the protocol writes it. */
    protocolUri: string;
    languageId: string;
    position: Position;
    /** vscode.InlineCompletionTriggerKind: 0 Invoke (asked for explicitly), 1 Automatic (typing). */
    vscodeTriggerKind: number;
    selected?: { range: Range; text: string };
}

/** What the extension knows when a request comes. */
export interface InlineState {
    /** `umbra.enable` (the toggle). */
    enabled: boolean;
    /** A language client is running. */
    running: boolean;
    languages: readonly string[];
    exclusions: Exclusions;
    /** `umbra.debounceMs`: fixed, or null for adaptive. */
    debounceMs: number | null;
    latency: LatencyTracker;
}

/** Why no completion is asked for a document (nothing is sent at all). */
export type Blocker =
    | { kind: 'disabled' }
    | { kind: 'stopped' }
    | { kind: 'language'; languageId: string }
    | { kind: 'excluded'; glob: string };

export function blocker(state: InlineState, target: Pick<InlineTarget, 'uri' | 'languageId'>): Blocker | undefined {
    if (!state.enabled) {
        return { kind: 'disabled' };
    }
    if (!state.running) {
        return { kind: 'stopped' };
    }
    if (!state.languages.includes(target.languageId)) {
        return { kind: 'language', languageId: target.languageId };
    }
    const glob = state.exclusions.matching(target.uri);
    return glob === undefined ? undefined : { kind: 'excluded', glob };
}

/** The blocker in words, for "Umbra: Trigger Completion Now". */
export function describeBlocker(b: Blocker): string {
    switch (b.kind) {
        case 'disabled':
            return 'Umbra is off (umbra.enable); run "Umbra: Toggle Completions" to turn it on.';
        case 'stopped':
            return 'the Umbra language server is not running; see the Umbra output, or run "Umbra: Restart Server".';
        case 'language':
            return `Umbra does not complete ${b.languageId} documents (umbra.languages).`;
        case 'excluded':
            return `this file is excluded by "${b.glob}" (umbra.exclude): it is never sent to Umbra.`;
    }
}

/** Asks the server through `send` for completions at `target`: nothing at all when a blocker
 * applies; otherwise after the debounce, on `token`, whose cancellation before sending drops the
 * request and afterwards sends `$/cancelRequest`. Undefined when blocked or cancelled; errors
 * reject. Answered requests feed the adaptive debounce. */
export async function requestInline(
    send: Send<InlineCompletionParams, unknown>,
    target: InlineTarget,
    state: InlineState,
    token: CancellationLike,
): Promise<InlineItem[] | undefined> {
    if (blocker(state, target) !== undefined) {
        return undefined;
    }
    const invoked = target.vscodeTriggerKind === 0;
    const result = await debouncedRequest(
        timed(send, state.latency),
        () => inlineParams(target.protocolUri, target.position, target.vscodeTriggerKind, target.selected),
        token,
        debounceMsFor(invoked, state.debounceMs, state.latency),
        isCancellation,
    );
    return result === undefined ? undefined : mapInlineResult(result);
}
