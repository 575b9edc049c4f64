// How the language server is started: `umbra lsp` over stdio, or `<python> -m lsp`.
//
// Pure: only a type is imported from vscode-languageclient, so node tests load this module
// without VS Code. The returned object is a vscode-languageclient `Executable`; `transport` is
// left unset on purpose — the client then talks over the child's stdin/stdout without adding a
// `--stdio` flag the contract does not define.

import type { Executable } from 'vscode-languageclient/node';
import type { ServerSettings } from './settings';

export type Environment = Record<string, string | undefined>;

/** Command and arguments that start the server. */
export function serverCommand(server: ServerSettings): { command: string; args: string[] } {
    if (server.python !== null) {
        return { command: server.python, args: ['-m', 'lsp', ...server.args] };
    }
    return { command: server.path, args: ['lsp', ...server.args] };
}

/** The server's environment: the editor's own (so the variable named by `cloud.tokenEnv`
 * reaches it) plus unbuffered Python output so its log lines arrive as they are written.
 * Nothing is removed and no secret is added. */
export function serverEnvironment(base: Environment): Record<string, string> {
    const env: Record<string, string> = {};
    for (const [key, value] of Object.entries(base)) {
        if (value !== undefined) {
            env[key] = value;
        }
    }
    env.PYTHONUNBUFFERED = '1';
    return env;
}

/** vscode-languageclient ServerOptions for `settings`, inheriting `baseEnv`. The working
 * directory is left to the client (the first workspace folder). */
export function serverOptions(server: ServerSettings, baseEnv: Environment): Executable {
    const { command, args } = serverCommand(server);
    return { command, args, options: { env: serverEnvironment(baseEnv) } };
}

/** A shell-like rendering of the command line for logs (no environment values). */
export function describeCommand(server: ServerSettings): string {
    const { command, args } = serverCommand(server);
    return [command, ...args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
}
