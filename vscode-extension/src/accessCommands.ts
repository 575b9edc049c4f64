// "Umbra: Rotate Access Key" and "Umbra: Show Access Status": `umbra keys access ...` typed
// into a new integrated terminal (command lines built in accessCli.ts).
//
// The CLI prints a rotated key once, on stdout, in the user's own terminal: the extension never
// reads the terminal, so the key never enters its memory or its log. The terminal is transient
// (not restored, with its contents, after a reload).

import * as vscode from 'vscode';
import {
    AccessAction,
    AccessCommandError,
    COMMAND_ACCESS_STATUS,
    COMMAND_ROTATE_ACCESS_KEY,
    accessArgv,
    commandLine,
    shellKind,
    validateAccessKeyName,
} from './accessCli';
import type { UmbraSettings } from './settings';

const OPEN_SETTINGS = 'Open Settings';
const SHOW_OUTPUT = 'Show Output';

/** Registers both commands; `current` gives the settings in force (undefined while invalid). */
export function registerAccessCommands(
    current: () => UmbraSettings | undefined,
    log: vscode.LogOutputChannel,
): vscode.Disposable[] {
    return [
        vscode.commands.registerCommand(COMMAND_ROTATE_ACCESS_KEY, () => rotateAccessKey(current(), log)),
        vscode.commands.registerCommand(COMMAND_ACCESS_STATUS, () => accessStatus(current(), log)),
    ];
}

async function rotateAccessKey(settings: UmbraSettings | undefined, log: vscode.LogOutputChannel): Promise<void> {
    const bundle = await bundleOf(settings, log);
    if (settings === undefined || bundle === undefined) {
        return;
    }
    const name = await vscode.window.showInputBox({
        title: 'Umbra: Rotate Access Key',
        prompt: `Name of the access key of ${bundle} to rotate. The new key is shown once, in a terminal.`,
        placeHolder: 'team-a',
        ignoreFocusOut: true,
        validateInput: validateAccessKeyName,
    });
    if (name === undefined) {
        return;
    }
    const confirmed = await vscode.window.showWarningMessage(
        `Rotate the access key "${name}"?`,
        {
            modal: true,
            detail:
                'Its current key stops unlocking its revealing adapter at once. The new key is printed once in ' +
                'the terminal: give it to its holders over a secure channel; they import it with ' +
                '`umbra keys access import`.',
        },
        'Rotate',
    );
    if (confirmed !== 'Rotate') {
        return;
    }
    runInTerminal(`Umbra: rotate access key ${name}`, settings, bundle, { kind: 'rotate', name }, log);
}

async function accessStatus(settings: UmbraSettings | undefined, log: vscode.LogOutputChannel): Promise<void> {
    const bundle = await bundleOf(settings, log);
    if (settings === undefined || bundle === undefined) {
        return;
    }
    runInTerminal('Umbra: access status', settings, bundle, { kind: 'status' }, log);
}

/** The configured bundle; undefined (after telling the user why) when there is none. */
async function bundleOf(settings: UmbraSettings | undefined, log: vscode.LogOutputChannel): Promise<string | undefined> {
    if (settings === undefined) {
        const choice = await vscode.window.showErrorMessage(
            'Umbra: the settings are invalid; fix them first (the Umbra output lists the problems).',
            SHOW_OUTPUT,
        );
        if (choice === SHOW_OUTPUT) {
            log.show(true);
        }
        return undefined;
    }
    if (settings.model.bundle === null) {
        const choice = await vscode.window.showErrorMessage(
            'Umbra: access keys belong to a client bundle, and no bundle is configured. ' +
                'Set umbra.model.bundle to the bundle directory made by `umbra init`.',
            OPEN_SETTINGS,
        );
        if (choice === OPEN_SETTINGS) {
            await vscode.commands.executeCommand('workbench.action.openSettings', 'umbra.model.bundle');
        }
        return undefined;
    }
    return settings.model.bundle;
}

function runInTerminal(
    title: string,
    settings: UmbraSettings,
    bundle: string,
    action: AccessAction,
    log: vscode.LogOutputChannel,
): void {
    let line: string;
    try {
        const argv = accessArgv(settings.server, bundle, settings.model.keyringService, action);
        line = commandLine(argv, shellKind(vscode.env.shell, process.platform));
    } catch (error) {
        if (!(error instanceof AccessCommandError)) {
            throw error;
        }
        log.error(`${title}: ${error.message}`);
        void vscode.window.showErrorMessage(`Umbra: cannot type this command into your terminal's shell — ${error.message}`);
        return;
    }
    // The line holds the CLI, the key's name and the bundle path: no secret.
    log.info(`${title}: running in a new terminal: ${line}`);
    const terminal = vscode.window.createTerminal({
        name: title,
        cwd: vscode.workspace.workspaceFolders?.[0]?.uri,
        isTransient: true,
    });
    terminal.show();
    terminal.sendText(line, true);
}
