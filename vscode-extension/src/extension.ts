// Entry point: wires settings, the language client, the inline provider, the status bar and
// the commands together. Each concern lives in its own module.

import * as os from 'os';
import * as vscode from 'vscode';
import { DidChangeConfigurationNotification, LanguageClient, State } from 'vscode-languageclient/node';
import { registerAccessCommands } from './accessCommands';
import { createLanguageClient } from './client';
import { COMMAND_MENU, registerCommands } from './commands';
import { LatencyTracker } from './debounce';
import { Exclusions } from './exclusions';
import { InlineProvider } from './inline';
import { InlineState } from './inlineRequest';
import { LANGUAGES, documentSelector } from './languages';
import { STATUS_METHOD, describeError } from './protocol';
import { describeCommand } from './server';
import { SettingsError, UmbraSettings, readSettings, settingsChange, toInitializationOptions } from './settings';
import { StatusBar } from './status';

const COMMAND_RESTART = 'umbra.restartServer';
const COMMAND_SHOW_OUTPUT = 'umbra.showOutput';

let log: vscode.LogOutputChannel;
let status: StatusBar;
let client: LanguageClient | undefined;
let settings: UmbraSettings | undefined;
let exclusions = new Exclusions([]);
let latency = new LatencyTracker();
let queue: Promise<void> = Promise.resolve();

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    log = vscode.window.createOutputChannel('Umbra', { log: true });
    status = new StatusBar(log, COMMAND_MENU);
    const provider = new InlineProvider(() => client, inlineState, log);
    context.subscriptions.push(
        log,
        status,
        // Registered once for every language Umbra can complete; the provider answers only for
        // those `umbra.languages` selects and `umbra.exclude` leaves, so changing the settings
        // needs no re-registration.
        vscode.languages.registerInlineCompletionItemProvider(documentSelector(LANGUAGES), provider),
        vscode.commands.registerCommand(COMMAND_RESTART, () => {
            status.onRestart();
            return schedule(true);
        }),
        vscode.commands.registerCommand(COMMAND_SHOW_OUTPUT, () => log.show()),
        ...registerAccessCommands(() => settings, log),
        ...registerCommands({ settings: () => settings, inlineState, log, storage: context.globalStorageUri }),
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (e.affectsConfiguration('umbra')) {
                void schedule(false);
            }
        }),
        vscode.workspace.onDidChangeWorkspaceFolders(() => void schedule(false)),
    );
    await schedule(true);
}

/** What a completion request is checked against now; undefined while the settings are invalid. */
function inlineState(): InlineState | undefined {
    if (settings === undefined) {
        return undefined;
    }
    return {
        enabled: settings.enable,
        running: client?.isRunning() ?? false,
        languages: settings.languages,
        exclusions,
        debounceMs: settings.debounceMs,
        latency,
    };
}

export function deactivate(): Thenable<void> | undefined {
    return queue.then(stopClient);
}

/** Runs start/stop/restart one at a time, in order. */
function schedule(force: boolean): Promise<void> {
    queue = queue.then(() => reconcile(force)).catch((error) => log.error(`server lifecycle: ${describeError(error)}`));
    return queue;
}

/** Brings the client in line with the current settings: new options go to the running server
 * (`workspace/didChangeConfiguration`); a new process only when needed (or forced). */
async function reconcile(force: boolean): Promise<void> {
    let next: UmbraSettings;
    try {
        next = readSettings(vscode.workspace.getConfiguration('umbra'), {
            workspaceFolder: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
            userHome: os.homedir(),
        });
    } catch (error) {
        if (!(error instanceof SettingsError)) {
            throw error;
        }
        await stopClient();
        settings = undefined;
        log.error(error.message);
        status.showClientState('misconfigured', error.problems.join('\n'));
        void vscode.window.showErrorMessage(`Umbra: invalid settings — ${error.problems.join('; ')}`);
        return;
    }
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
    const nextExclusions = new Exclusions(next.exclude, folders);
    // Which documents are synced depends on the folders too (globs relative to them).
    const resync = JSON.stringify([exclusions.globs, exclusions.folders]) !== JSON.stringify([next.exclude, nextExclusions.folders]);
    const change = force || resync ? 'restart' : settingsChange(settings, next);
    settings = next;
    exclusions = nextExclusions;
    if (change === 'none') {
        return;
    }
    if (change === 'reconfigure' && client?.isRunning()) {
        log.info('new settings: sent to the running language server');
        await client.sendNotification(DidChangeConfigurationNotification.type, { settings: toInitializationOptions(next) });
        return;
    }
    await stopClient();
    if (!next.enable) {
        status.showClientState('disabled');
        return;
    }
    await startClient(next);
}

async function startClient(s: UmbraSettings): Promise<void> {
    log.info(`starting the language server: ${describeCommand(s.server)}`);
    const started = createLanguageClient(s, () => settings ?? s, exclusions, log);
    latency = new LatencyTracker(); // another server, another latency
    started.onNotification(STATUS_METHOD, (params) => status.onNotification(params));
    started.onDidChangeState((e) => {
        if (e.newState === State.Stopped && client === started) {
            status.showClientState('stopped', 'See the Umbra output for the reason; run "Umbra: Restart Server" to retry.');
        }
    });
    client = started;
    status.onNotification({ state: 'starting', message: 'starting the language server', mode: '' });
    try {
        await started.start();
    } catch (error) {
        log.error(`the language server did not start: ${describeError(error)}`);
        status.showClientState('stopped', describeError(error));
    }
}

async function stopClient(): Promise<void> {
    const running = client;
    client = undefined;
    if (running === undefined) {
        return;
    }
    try {
        if (running.needsStop()) {
            await running.stop();
        }
    } catch (error) {
        log.warn(`stopping the language server: ${describeError(error)}`);
    }
}
