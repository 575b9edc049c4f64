// "Umbra: Open Security Report": `umbra audit report --out FILE` run as a child process (no
// shell), then FILE opened. The report attacks the traffic this client recorded while
// `umbra audit on` and shows what a curious cloud could reconstruct — so it quotes the user's
// code: it is written (mode 0600, by the CLI) into the extension's private storage, never into
// the workspace, and its contents never pass through the extension or its log.
//
// Pure: no `vscode` import (commands.ts shows the progress and opens the file).

import { spawn } from 'node:child_process';
import { cliCommand } from './accessCli';
import type { CancellationLike } from './debounce';
import { Environment, serverEnvironment } from './server';
import type { ServerSettings } from './settings';

export const COMMAND_SECURITY_REPORT = 'umbra.openSecurityReport';
export const REPORT_FILE = 'umbra-audit.html';

/** argv of `umbra audit report --out OUT [--threads N]` with the server's CLI. */
export function reportArgv(server: ServerSettings, out: string, threads: number | null): string[] {
    return [...cliCommand(server), 'audit', 'report', '--out', out, ...(threads === null ? [] : ['--threads', String(threads)])];
}

export interface CliOutcome {
    /** Exit status; null when the process was killed (cancelled) or could not start. */
    code: number | null;
    cancelled: boolean;
    /** The last non-empty line the CLI wrote on stderr, else on stdout (its error or its "wrote FILE"). */
    lastLine: string;
}

/** Runs `argv` (no shell) in `cwd` with the editor's environment, passing each output line to
 * `onLine`; a cancelled `token` terminates it. Never rejects: a program that cannot start is
 * an outcome with code null and the reason as its last line. */
export function runCli(
    argv: string[],
    options: { cwd: string; env: Environment; token?: CancellationLike; onLine?: (line: string) => void },
): Promise<CliOutcome> {
    return new Promise<CliOutcome>((resolve) => {
        const last = { stdout: '', stderr: '' };
        let cancelled = false;
        const child = spawn(argv[0], argv.slice(1), {
            cwd: options.cwd,
            env: serverEnvironment(options.env),
            stdio: ['ignore', 'pipe', 'pipe'],
        });
        const cancel = () => {
            cancelled = true;
            child.kill('SIGTERM');
        };
        const subscription = options.token?.onCancellationRequested(cancel);
        if (options.token?.isCancellationRequested) {
            cancel();
        }
        for (const stream of ['stdout', 'stderr'] as const) {
            let pending = '';
            child[stream].setEncoding('utf8');
            child[stream].on('data', (chunk: string) => {
                const lines = (pending + chunk).split(/\r?\n/);
                pending = lines.pop() ?? '';
                lines.forEach((line) => take(stream, line));
            });
            child[stream].on('end', () => take(stream, pending));
        }
        function take(stream: 'stdout' | 'stderr', line: string): void {
            if (line.trim() !== '') {
                last[stream] = line.trim();
                options.onLine?.(line);
            }
        }
        let settled = false;
        const finish = (code: number | null, reason?: string) => {
            if (!settled) {
                settled = true;
                subscription?.dispose();
                resolve({ code, cancelled, lastLine: reason ?? (last.stderr || last.stdout) });
            }
        };
        child.on('error', (error) => finish(null, `${argv[0]} could not be run: ${error.message}`));
        child.on('close', (code) => finish(cancelled ? null : code));
    });
}
