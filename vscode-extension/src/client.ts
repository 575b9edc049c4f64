// Construction of the LanguageClient for given settings: server command, documents, options.

import { LanguageClient, LanguageClientOptions, RevealOutputChannelOn } from 'vscode-languageclient/node';
import type { LogOutputChannel } from 'vscode';
import { Exclusions, syncMiddleware } from './exclusions';
import { documentSelector } from './languages';
import { serverOptions } from './server';
import { UmbraSettings, toInitializationOptions } from './settings';

export const CLIENT_ID = 'umbra';
export const CLIENT_NAME = 'Umbra';

/** The client for `settings`. Documents `exclusions` matches are never synced: the selector
 * picks the languages, the sync middleware drops every notification about an excluded file.
 * `current` gives the settings in force when the server is (re)initialized: the client restarts
 * a server that crashed, and options sent since with `workspace/didChangeConfiguration` must
 * not be lost then. */
export function createLanguageClient(settings: UmbraSettings, current: () => UmbraSettings, exclusions: Exclusions,
                                     log: LogOutputChannel): LanguageClient {
    const options: LanguageClientOptions = {
        documentSelector: documentSelector(settings.languages),
        initializationOptions: () => toInitializationOptions(current()),
        // Server stderr and client messages go to the Umbra output channel. No trace channel:
        // a protocol trace would copy the user's code into the log.
        outputChannel: log,
        revealOutputChannelOn: RevealOutputChannelOn.Never,
        middleware: {
            ...syncMiddleware(exclusions),
            // VS Code gets Umbra's completions inline (inline.ts). The server's classic
            // textDocument/completion is for editors without inline completion; asking for both
            // would make each keystroke's suggest request supersede the inline one in the
            // server's per-document session, and run the model twice.
            provideCompletionItem: () => undefined,
        },
    };
    return new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions(settings.server, process.env), options);
}
