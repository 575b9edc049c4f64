// Ghost-text completions: a vscode InlineCompletionItemProvider backed by the server's
// `textDocument/inlineCompletion`. Which requests go out and when lives in inlineRequest.ts
// (checks, debounce, cancellation), the protocol mapping in protocol.ts; this module only
// adapts them to VS Code.

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { InlineState, InlineTarget, requestInline } from './inlineRequest';
import { INLINE_COMPLETION_METHOD, InlineItem, Range, describeError } from './protocol';

export class InlineProvider implements vscode.InlineCompletionItemProvider {
    constructor(
        private readonly currentClient: () => LanguageClient | undefined,
        private readonly state: () => InlineState | undefined,
        private readonly log: vscode.LogOutputChannel,
    ) {}

    async provideInlineCompletionItems(
        document: vscode.TextDocument,
        position: vscode.Position,
        context: vscode.InlineCompletionContext,
        token: vscode.CancellationToken,
    ): Promise<vscode.InlineCompletionItem[] | undefined> {
        const client = this.currentClient();
        const state = this.state();
        if (client === undefined || state === undefined) {
            return undefined;
        }
        const target: InlineTarget = {
            uri: document.uri,
            protocolUri: client.code2ProtocolConverter.asUri(document.uri),
            languageId: document.languageId,
            position,
            vscodeTriggerKind: context.triggerKind,
            selected: context.selectedCompletionInfo && {
                range: context.selectedCompletionInfo.range,
                text: context.selectedCompletionInfo.text,
            },
        };
        try {
            const items = await requestInline(
                (p, t) => client.sendRequest<unknown>(INLINE_COMPLETION_METHOD, p, t as vscode.CancellationToken),
                target,
                state,
                token,
            );
            return items?.map(toVscodeItem);
        } catch (error) {
            // The server reports outages through umbra/status; here only the reason is logged.
            this.log.warn(`inline completion failed: ${describeError(error)}`);
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
