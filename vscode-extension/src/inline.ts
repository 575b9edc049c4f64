// Ghost-text completions: a vscode InlineCompletionItemProvider backed by the server's
// `textDocument/inlineCompletion`. The protocol mapping lives in protocol.ts and the
// debounce/cancellation logic in debounce.ts; this module only adapts them to VS Code.

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { debouncedRequest } from './debounce';
import {
    INLINE_COMPLETION_METHOD,
    InlineCompletionParams,
    InlineItem,
    Range,
    describeError,
    inlineParams,
    isCancellation,
    mapInlineResult,
} from './protocol';

export class InlineProvider implements vscode.InlineCompletionItemProvider {
    constructor(
        private readonly currentClient: () => LanguageClient | undefined,
        private readonly debounceMs: () => number,
        private readonly languages: () => readonly string[],
        private readonly log: vscode.LogOutputChannel,
    ) {}

    async provideInlineCompletionItems(
        document: vscode.TextDocument,
        position: vscode.Position,
        context: vscode.InlineCompletionContext,
        token: vscode.CancellationToken,
    ): Promise<vscode.InlineCompletionItem[] | undefined> {
        const client = this.currentClient();
        if (client === undefined || !client.isRunning() || !this.languages().includes(document.languageId)) {
            return undefined;
        }
        const params = (): InlineCompletionParams =>
            inlineParams(
                client.code2ProtocolConverter.asUri(document.uri),
                position,
                context.triggerKind,
                context.selectedCompletionInfo && {
                    range: context.selectedCompletionInfo.range,
                    text: context.selectedCompletionInfo.text,
                },
            );
        let result: unknown;
        try {
            result = await debouncedRequest(
                (p, t) => client.sendRequest<unknown>(INLINE_COMPLETION_METHOD, p, t as vscode.CancellationToken),
                params,
                token,
                this.debounceMs(),
                isCancellation,
            );
        } catch (error) {
            // The server reports outages through umbra/status; here only the reason is logged.
            this.log.warn(`inline completion failed: ${describeError(error)}`);
            return undefined;
        }
        if (result === undefined) {
            return undefined;
        }
        try {
            return mapInlineResult(result).map(toVscodeItem);
        } catch (error) {
            this.log.warn(`inline completion result ignored: ${describeError(error)}`);
            return undefined;
        }
    }
}

function toVscodeItem(item: InlineItem): vscode.InlineCompletionItem {
    const text = item.snippet ? new vscode.SnippetString(item.text) : item.text;
    const out = new vscode.InlineCompletionItem(text, item.range && toVscodeRange(item.range));
    if (item.filterText !== undefined) {
        out.filterText = item.filterText;
    }
    return out;
}

function toVscodeRange(r: Range): vscode.Range {
    return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}
