// "Umbra: Toggle Completions", "Umbra: Trigger Completion Now" and "Umbra: Open Security
// Report" (the access-key commands are in accessCommands.ts). The decisions are in pure modules:
// settings.ts (`toggleTarget`), inlineRequest.ts (`blocker`) and securityReport.ts.

import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import { InlineState, blocker, describeBlocker } from './inlineRequest';
import { COMMAND_SECURITY_REPORT, REPORT_FILE, reportArgv, runCli } from './securityReport';
import { UmbraSettings, toggleTarget } from './settings';

export const COMMAND_TOGGLE = 'umbra.toggle';
export const COMMAND_TRIGGER = 'umbra.triggerCompletion';
export const COMMAND_MENU = 'umbra.showMenu';

/** The status item's menu: every command, the toggle first. */
const MENU: readonly { command: string; label: string }[] = [
    { command: COMMAND_TOGGLE, label: '' /* on or off, filled in */ },
    { command: COMMAND_TRIGGER, label: '$(sparkle) Trigger Completion Now' },
    { command: 'umbra.restartServer', label: '$(debug-restart) Restart Server' },
    { command: COMMAND_SECURITY_REPORT, label: '$(shield) Open Security Report' },
    { command: 'umbra.rotateAccessKey', label: '$(key) Rotate Access Key' },
    { command: 'umbra.accessStatus', label: '$(unlock) Show Access Status' },
    { command: 'umbra.showOutput', label: '$(output) Show Output' },
];

export interface CommandContext {
    /** The settings in force; undefined while they are invalid. */
    settings(): UmbraSettings | undefined;
    /** What a completion request would be checked against now. */
    inlineState(): InlineState | undefined;
    log: vscode.LogOutputChannel;
    /** The extension's private storage (the security report goes there). */
    storage: vscode.Uri;
}

export function registerCommands(ctx: CommandContext): vscode.Disposable[] {
    let reportRunning = false;
    return [
        vscode.commands.registerCommand(COMMAND_TOGGLE, () => toggle()),
        vscode.commands.registerCommand(COMMAND_TRIGGER, () => triggerNow(ctx)),
        vscode.commands.registerCommand(COMMAND_MENU, () => showMenu(ctx)),
        vscode.commands.registerCommand(COMMAND_SECURITY_REPORT, async () => {
            if (reportRunning) {
                void vscode.window.showInformationMessage('Umbra: the security report is being built already.');
                return;
            }
            reportRunning = true;
            try {
                await securityReport(ctx);
            } finally {
                reportRunning = false;
            }
        }),
    ];
}

async function showMenu(ctx: CommandContext): Promise<void> {
    const on = ctx.settings()?.enable ?? vscode.workspace.getConfiguration('umbra').get<boolean>('enable', true);
    const items = MENU.map((m) => ({
        label: m.command === COMMAND_TOGGLE ? (on ? '$(circle-slash) Turn Completions Off' : '$(check) Turn Completions On') : m.label,
        command: m.command,
    }));
    const picked = await vscode.window.showQuickPick(items, { title: 'Umbra' });
    if (picked !== undefined) {
        await vscode.commands.executeCommand(picked.command);
    }
}

/** Flips `umbra.enable` where it is decided (workspace or user settings). Off stops the
 * language server: nothing is synced or requested until it is on again. */
async function toggle(): Promise<void> {
    const config = vscode.workspace.getConfiguration('umbra');
    const next = !config.get<boolean>('enable', true);
    const target =
        toggleTarget(config.inspect('enable')) === 'workspace' ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
    await config.update('enable', next, target);
    vscode.window.setStatusBarMessage(`Umbra: completions ${next ? 'on' : 'off'}`, 3000);
}

/** Asks for a completion at the cursor at once: VS Code's inline-suggest trigger calls the
 * provider with an explicit invocation, which skips the debounce. When no request would go
 * out, says why instead. */
async function triggerNow(ctx: CommandContext): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (editor === undefined) {
        void vscode.window.showInformationMessage('Umbra: open a file to complete in.');
        return;
    }
    const state = ctx.inlineState();
    if (state === undefined) {
        void vscode.window.showErrorMessage('Umbra: the settings are invalid; the Umbra output lists the problems.');
        return;
    }
    const why = blocker(state, editor.document);
    if (why !== undefined) {
        void vscode.window.showInformationMessage(`Umbra: ${describeBlocker(why)}`);
        return;
    }
    await vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
}

/** Builds the report with progress (cancellable), then opens it. */
async function securityReport(ctx: CommandContext): Promise<void> {
    const settings = ctx.settings();
    if (settings === undefined) {
        void vscode.window.showErrorMessage('Umbra: the settings are invalid; the Umbra output lists the problems.');
        return;
    }
    await vscode.workspace.fs.createDirectory(ctx.storage);
    const out = path.join(ctx.storage.fsPath, REPORT_FILE);
    const argv = reportArgv(settings.server, out, settings.threads);
    ctx.log.info(`security report: running ${argv.join(' ')}`);
    const outcome = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: 'Umbra: building the security report', cancellable: true },
        (_progress, token) =>
            runCli(argv, {
                cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? os.homedir(),
                env: process.env,
                token,
                onLine: (line) => ctx.log.info(`security report: ${line}`),
            }),
    );
    if (outcome.cancelled) {
        ctx.log.info('security report: cancelled');
        return;
    }
    if (outcome.code !== 0) {
        ctx.log.error(`security report failed (exit status ${outcome.code}): ${outcome.lastLine}`);
        const choice = await vscode.window.showErrorMessage(`Umbra: no security report — ${outcome.lastLine}`, 'Show Output');
        if (choice === 'Show Output') {
            ctx.log.show(true);
        }
        return;
    }
    if (!(await vscode.env.openExternal(vscode.Uri.file(out)))) {
        void vscode.window.showInformationMessage(`Umbra: the security report is in ${out}`);
    }
}
