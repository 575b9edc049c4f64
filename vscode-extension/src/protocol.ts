// The wire shapes of the Umbra server contract and pure conversions between them and the
// plain values the editor side uses. No `vscode` import: tests run this under node.
//
// `textDocument/inlineCompletion` is LSP 3.18; vscode-languageclient 9 (LSP 3.17) has no
// feature for it, so the extension sends the request itself and these types describe it.

export interface Position {
    line: number;
    character: number;
}

export interface Range {
    start: Position;
    end: Position;
}

export const INLINE_COMPLETION_METHOD = 'textDocument/inlineCompletion';
export const STATUS_METHOD = 'umbra/status';

/** LSP 3.18 InlineCompletionTriggerKind (1-based, unlike vscode's 0-based enum). */
export const InlineTriggerKind = { Invoked: 1, Automatic: 2 } as const;
export type InlineTriggerKind = (typeof InlineTriggerKind)[keyof typeof InlineTriggerKind];

export interface InlineCompletionParams {
    textDocument: { uri: string };
    position: Position;
    context: {
        triggerKind: InlineTriggerKind;
        selectedCompletionInfo?: { range: Range; text: string };
    };
}

/** LSP 3.18 StringValue: a snippet given as `{kind: "snippet", value}`. */
export interface StringValue {
    kind: 'snippet';
    value: string;
}

export interface ProtocolInlineItem {
    insertText: string | StringValue;
    filterText?: string;
    range?: Range;
}

export type InlineCompletionResult = ProtocolInlineItem[] | { items: ProtocolInlineItem[] } | null;

/** One completion, ready to become a `vscode.InlineCompletionItem`. */
export interface InlineItem {
    text: string;
    snippet: boolean;
    filterText?: string;
    range?: Range;
}

/** vscode.InlineCompletionTriggerKind (Invoke = 0, Automatic = 1) → LSP (Invoked = 1, Automatic = 2). */
export function toProtocolTriggerKind(vscodeKind: number): InlineTriggerKind {
    return vscodeKind === 0 ? InlineTriggerKind.Invoked : InlineTriggerKind.Automatic;
}

/** Builds the request params from editor-side plain values. */
export function inlineParams(
    uri: string,
    position: Position,
    vscodeTriggerKind: number,
    selected?: { range: Range; text: string },
): InlineCompletionParams {
    const context: InlineCompletionParams['context'] = { triggerKind: toProtocolTriggerKind(vscodeTriggerKind) };
    if (selected !== undefined) {
        context.selectedCompletionInfo = { range: copyRange(selected.range), text: selected.text };
    }
    return { textDocument: { uri }, position: { line: position.line, character: position.character }, context };
}

/** Normalizes an `InlineCompletionItem[] | {items} | null` result. Items with no usable text or
 * a malformed range are dropped, not guessed at; empty insertions are dropped too (they would
 * show nothing). Throws only when the result itself has the wrong shape. */
export function mapInlineResult(result: unknown): InlineItem[] {
    if (result === null || result === undefined) {
        return [];
    }
    let items: unknown;
    if (Array.isArray(result)) {
        items = result;
    } else if (isObject(result) && Array.isArray(result.items)) {
        items = result.items;
    } else {
        throw new TypeError('inline completion result is neither an item array nor {items: [...]}');
    }
    const out: InlineItem[] = [];
    for (const raw of items as unknown[]) {
        const item = mapItem(raw);
        if (item !== undefined) {
            out.push(item);
        }
    }
    return out;
}

function mapItem(raw: unknown): InlineItem | undefined {
    if (!isObject(raw)) {
        return undefined;
    }
    let text: string;
    let snippet = false;
    if (typeof raw.insertText === 'string') {
        text = raw.insertText;
    } else if (isObject(raw.insertText) && raw.insertText.kind === 'snippet' && typeof raw.insertText.value === 'string') {
        text = raw.insertText.value;
        snippet = true;
    } else {
        return undefined;
    }
    if (text === '') {
        return undefined;
    }
    const item: InlineItem = { text, snippet };
    if (typeof raw.filterText === 'string') {
        item.filterText = raw.filterText;
    }
    if (raw.range !== undefined && raw.range !== null) {
        const range = parseRange(raw.range);
        if (range === undefined) {
            return undefined;
        }
        item.range = range;
    }
    return item;
}

export function parseRange(raw: unknown): Range | undefined {
    if (!isObject(raw)) {
        return undefined;
    }
    const start = parsePosition(raw.start);
    const end = parsePosition(raw.end);
    if (start === undefined || end === undefined) {
        return undefined;
    }
    if (end.line < start.line || (end.line === start.line && end.character < start.character)) {
        return undefined;
    }
    return { start, end };
}

function parsePosition(raw: unknown): Position | undefined {
    if (!isObject(raw)) {
        return undefined;
    }
    const { line, character } = raw;
    if (isIndex(line) && isIndex(character)) {
        return { line, character };
    }
    return undefined;
}

function isIndex(x: unknown): x is number {
    return typeof x === 'number' && Number.isInteger(x) && x >= 0;
}

function copyRange(r: Range): Range {
    return { start: { line: r.start.line, character: r.start.character }, end: { line: r.end.line, character: r.end.character } };
}

function isObject(x: unknown): x is Record<string, unknown> {
    return typeof x === 'object' && x !== null && !Array.isArray(x);
}

// -- errors --------------------------------------------------------------------------------

/** JSON-RPC / LSP codes meaning "the request was cancelled", by the client or the server. */
export const CANCELLED_CODES: readonly number[] = [-32800 /* RequestCancelled */, -32802 /* ServerCancelled */];

/** True for the error a cancelled request rejects with. */
export function isCancellation(error: unknown): boolean {
    return isObject(error) && typeof error.code === 'number' && CANCELLED_CODES.includes(error.code);
}

/** A one-line description of a failed request for the log: the message and code only, never
 * request data (which would carry the user's code). */
export function describeError(error: unknown): string {
    if (isObject(error) && typeof error.message === 'string') {
        const code = typeof error.code === 'number' ? ` (code ${error.code})` : '';
        return `${error.message}${code}`;
    }
    if (error instanceof Error) {
        return error.message;
    }
    return String(error);
}
