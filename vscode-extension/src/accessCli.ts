// The command lines of "Umbra: Rotate Access Key" and "Umbra: Show Access Status": which
// `umbra keys access ...` to run and how to type it into the user's shell.
//
// Pure: nothing here imports `vscode` (accessCommands.ts opens the terminal). The extension
// only builds and sends the command line; the new key is printed by the CLI into the user's
// own terminal and never passes through the extension.

import { DEFAULTS, ServerSettings } from './settings';

export const COMMAND_ROTATE_ACCESS_KEY = 'umbra.rotateAccessKey';
export const COMMAND_ACCESS_STATUS = 'umbra.accessStatus';

/** Names of access keys, as the CLI checks them (umbra/securegate/bundle_access.py `_NAME`). */
export const ACCESS_KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const MAX_ACCESS_KEY_NAME = 64;

/** The input box's check: undefined when `value` is a valid access-key name, else why not. */
export function validateAccessKeyName(value: string): string | undefined {
    if (value === '') {
        return 'Enter the name of the access key (e.g. team-a).';
    }
    if (value.length > MAX_ACCESS_KEY_NAME) {
        return `At most ${MAX_ACCESS_KEY_NAME} characters (this is ${value.length}).`;
    }
    if (!/^[A-Za-z0-9]/.test(value)) {
        return 'Start with a letter or a digit.';
    }
    if (!ACCESS_KEY_NAME.test(value)) {
        return "Use letters, digits, '.', '_' and '-' only.";
    }
    return undefined;
}

/** The command line cannot be built: an invalid name, or an argument that cannot be typed
 * safely into this kind of shell. */
export class AccessCommandError extends Error {
    constructor(message: string) {
        super(message);
        this.name = 'AccessCommandError';
    }
}

export type AccessAction = { kind: 'rotate'; name: string } | { kind: 'status' };

/** The Umbra CLI the server is started with: `<path>`, or `<python> -m umbra.cli.main` when
 * `umbra.server.python` is set (the server is then `<python> -m lsp`). `server.args` belong
 * to `lsp` and are not passed. */
export function cliCommand(server: ServerSettings): string[] {
    return server.python !== null ? [server.python, '-m', 'umbra.cli.main'] : [server.path];
}

/** argv of `umbra keys access rotate NAME --bundle DIR` or `... status --bundle DIR`;
 * `--service` only when the keyring service is not the CLI's default (the one the server
 * reads the bundle's keys from, `umbra.model.keyringService`). Throws on an invalid name. */
export function accessArgv(server: ServerSettings, bundle: string, keyringService: string, action: AccessAction): string[] {
    const sub = action.kind === 'rotate' ? ['rotate', checkedName(action.name)] : ['status'];
    const service = keyringService === DEFAULTS.model.keyringService ? [] : ['--service', keyringService];
    return [...cliCommand(server), 'keys', 'access', ...sub, '--bundle', bundle, ...service];
}

function checkedName(name: string): string {
    const problem = validateAccessKeyName(name);
    if (problem !== undefined) {
        throw new AccessCommandError(`invalid access key name ${JSON.stringify(name)}: ${problem}`);
    }
    return name;
}

/** How the integrated terminal's shell reads a command line. */
export type ShellKind = 'posix' | 'fish' | 'powershell' | 'cmd';

/** The kind of shell at `shellPath` (`vscode.env.shell`, the default terminal profile's);
 * unknown shells are taken as POSIX, no shell as the platform's default. */
export function shellKind(shellPath: string | undefined, platform: string): ShellKind {
    const base = (shellPath ?? '').split(/[\\/]/).pop()?.toLowerCase().replace(/\.exe$/, '') ?? '';
    if (base === '') {
        return platform === 'win32' ? 'powershell' : 'posix';
    }
    if (base === 'pwsh' || base === 'powershell' || base.startsWith('pwsh-')) {
        return 'powershell';
    }
    if (base === 'cmd') {
        return 'cmd';
    }
    if (base === 'fish') {
        return 'fish';
    }
    return 'posix';
}

/** Words each shell takes literally without quotes (conservative: '=' could make a first word
 * an assignment, ',' is PowerShell's array operator and a separator to cmd.exe, and PowerShell
 * may read a word that starts with a digit as a number). */
const SAFE: Record<ShellKind, RegExp> = {
    posix: /^[A-Za-z0-9_@%+:,./-]+$/,
    fish: /^[A-Za-z0-9_@+:,./-]+$/,
    powershell: /^(?:[A-Za-z][A-Za-z0-9_./:\\-]*|--?[A-Za-z][A-Za-z-]*)$/,
    cmd: /^[A-Za-z0-9_+:./\\-]+$/,
};

/** `arg` as one word of `kind`'s command line: unchanged when it needs no quotes, else quoted.
 * Control characters (a newline would run the line early) are refused everywhere; cmd.exe
 * cannot quote '"' or '%', nor PowerShell '"' for a native program. */
export function quoteArg(arg: string, kind: ShellKind): string {
    if (/[\u0000-\u001f\u007f]/.test(arg)) {
        throw new AccessCommandError(`${JSON.stringify(arg)} contains a control character`);
    }
    if (SAFE[kind].test(arg)) {
        return arg;
    }
    switch (kind) {
        case 'posix':
            return `'${arg.replace(/'/g, `'\\''`)}'`;
        case 'fish':
            return `'${arg.replace(/[\\']/g, '\\$&')}'`;
        case 'powershell':
            if (arg.includes('"')) {
                throw new AccessCommandError(`${JSON.stringify(arg)} contains '"', which PowerShell does not pass intact`);
            }
            // PowerShell also takes the typographic single quotes as quotes: double them all.
            return `'${arg.replace(/['\u2018\u2019\u201a\u201b]/g, '$&$&')}'`;
        case 'cmd':
            if (/["%]/.test(arg)) {
                throw new AccessCommandError(`${JSON.stringify(arg)} contains '"' or '%', which cmd.exe cannot quote`);
            }
            return `"${arg}"`;
    }
}

/** The whole command line for `kind` (PowerShell runs a program named by a quoted string
 * only through the call operator `&`). */
export function commandLine(argv: string[], kind: ShellKind): string {
    const words = argv.map((a) => quoteArg(a, kind)).join(' ');
    return kind === 'powershell' ? `& ${words}` : words;
}
