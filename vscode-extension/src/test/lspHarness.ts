// Starts the REAL Umbra language server the way the extension does (server.ts, settings.ts)
// and drives it over stdio with vscode-languageserver-protocol — VS Code itself is the only
// part not present.
//
// The command comes from UMBRA_LSP_COMMAND ("<umbra> lsp [args]" or "<python> -m lsp [args]",
// whitespace-separated or a JSON array), default `<repo>/.venv/bin/umbra lsp`. The model comes
// from UMBRA_TEST_MODEL_DIR; without it a tiny random model is built with the repo's
// tests/tiny_models.py.

import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import {
    InitializeResult,
    ProtocolConnection,
    StreamMessageReader,
    StreamMessageWriter,
    Trace,
    createProtocolConnection,
} from 'vscode-languageserver-protocol/node';
import { serverOptions } from '../server';
import { ConfigSource, InitializationOptions, UmbraSettings, readSettings, toInitializationOptions } from '../settings';
import { StatusParams, parseStatus } from '../statusModel';
import { STATUS_METHOD } from '../protocol';

/** The Umbra checkout this extension lives in. */
export const REPO = resolve(__dirname, '..', '..', '..');

/** Settings keys for the server command taken from UMBRA_LSP_COMMAND (or the default). */
export function serverCommandSettings(spec = process.env.UMBRA_LSP_COMMAND): Record<string, unknown> {
    const words = spec ? parseCommand(spec) : [join(REPO, '.venv', 'bin', 'umbra'), 'lsp'];
    if (words.length >= 3 && words[1] === '-m' && words[2] === 'lsp') {
        return { 'server.python': words[0], 'server.args': words.slice(3) };
    }
    if (words.length >= 2 && words[1] === 'lsp') {
        return { 'server.path': words[0], 'server.args': words.slice(2) };
    }
    throw new Error(`UMBRA_LSP_COMMAND must be "<umbra> lsp [args]" or "<python> -m lsp [args]", got ${JSON.stringify(spec)}`);
}

function parseCommand(spec: string): string[] {
    const trimmed = spec.trim();
    if (trimmed.startsWith('[')) {
        const parsed: unknown = JSON.parse(trimmed);
        if (!Array.isArray(parsed) || !parsed.every((x) => typeof x === 'string')) {
            throw new Error('UMBRA_LSP_COMMAND as JSON must be an array of strings');
        }
        return parsed;
    }
    return trimmed.split(/\s+/);
}

/** The Python interpreter of the server under test (for building a tiny model). */
function pythonFor(settings: Record<string, unknown>): string {
    if (typeof settings['server.python'] === 'string') {
        return settings['server.python'];
    }
    const besideUmbra = join(dirname(String(settings['server.path'])), 'python');
    return existsSync(besideUmbra) ? besideUmbra : join(REPO, '.venv', 'bin', 'python');
}

let builtModel: string | undefined;

/** UMBRA_TEST_MODEL_DIR, or a tiny random Llama model with a FIM tokenizer built once. */
export function testModelDir(): string {
    const fromEnv = process.env.UMBRA_TEST_MODEL_DIR;
    if (fromEnv) {
        if (!existsSync(join(fromEnv, 'config.json'))) {
            throw new Error(`UMBRA_TEST_MODEL_DIR=${fromEnv} holds no config.json`);
        }
        return fromEnv;
    }
    if (builtModel === undefined) {
        const dir = join(mkdtempSync(join(tmpdir(), 'umbra-ext-model-')), 'tiny');
        const python = pythonFor(serverCommandSettings());
        const code =
            'import sys; from pathlib import Path; from tests.tiny_models import build_tiny_model_dir; ' +
            "build_tiny_model_dir(Path(sys.argv[1]), family='llama')";
        const run = spawnSync(python, ['-c', code, dir], { cwd: REPO, encoding: 'utf8' });
        if (run.status !== 0) {
            throw new Error(`building a tiny model with ${python} failed:\n${run.stderr || run.error}`);
        }
        builtModel = dir;
    }
    return builtModel;
}

/** Removes the model testModelDir() built, if it built one. */
export function removeBuiltModel(): void {
    if (builtModel !== undefined) {
        rmSync(dirname(builtModel), { recursive: true, force: true });
        builtModel = undefined;
    }
}

/** Settings as a user would write them, over the extension's defaults. */
export function testSettings(values: Record<string, unknown>): UmbraSettings {
    const source: ConfigSource = {
        get: <T>(key: string, d: T) => (Object.prototype.hasOwnProperty.call(values, key) ? values[key] : d) as T,
    };
    return readSettings(source, { workspaceFolder: REPO, userHome: process.env.HOME });
}

export interface RunningServer {
    readonly connection: ProtocolConnection;
    readonly initializeResult: InitializeResult;
    readonly initializationOptions: InitializationOptions;
    /** Every umbra/status notification received, in order. */
    readonly statuses: StatusParams[];
    /** Methods of the requests and notifications this client sent, in order (from the
     * connection's own trace; methods only, never params). */
    readonly sent: string[];
    waitForStatus(match: (s: StatusParams) => boolean, timeoutMs: number): Promise<StatusParams>;
    /** The server's stderr so far (its log), for failure messages. */
    log(): string;
    /** shutdown + exit; resolves with the exit code. */
    shutdown(timeoutMs: number): Promise<number | null>;
    /** Kills the process if it is still running (cleanup after a failure). */
    kill(): void;
}

/** Spawns the server with the extension's ServerOptions, initializes it with the extension's
 * initializationOptions and returns once `initialized` is sent. */
export async function startServer(settings: UmbraSettings, extraEnv: Record<string, string> = {}): Promise<RunningServer> {
    const executable = serverOptions(settings.server, { ...process.env, ...extraEnv });
    const child: ChildProcess = spawn(executable.command, executable.args ?? [], {
        cwd: REPO,
        env: executable.options?.env,
        stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
        stderr += chunk;
    });
    const exited = new Promise<number | null>((resolveExit) => child.on('exit', (code) => resolveExit(code)));
    const spawnError = new Promise<never>((_, reject) => child.on('error', reject));

    const connection = createProtocolConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
    const statuses: StatusParams[] = [];
    const waiters: (() => void)[] = [];
    connection.onNotification(STATUS_METHOD, (params: unknown) => {
        const status = parseStatus(params);
        if (status === undefined) {
            throw new Error(`umbra/status does not follow the contract: ${JSON.stringify(params)}`);
        }
        statuses.push(status);
        waiters.splice(0).forEach((wake) => wake());
    });
    const sent: string[] = [];
    await connection.trace(
        Trace.Messages,
        {
            log: (message: unknown) => {
                const m = /^Sending (?:request|notification) '([^' ]+)/.exec(String(message));
                if (m) {
                    sent.push(m[1]);
                }
            },
        },
        false,
    );
    connection.listen();

    const initializationOptions = toInitializationOptions(settings);
    const initializeResult = await Promise.race([
        spawnError,
        exited.then((code) => {
            throw new Error(`the server exited (${code}) before answering initialize:\n${stderr}`);
        }),
        connection.sendRequest('initialize', {
            processId: process.pid,
            clientInfo: { name: 'umbra-vscode-extension-tests' },
            rootUri: null,
            workspaceFolders: null,
            capabilities: {
                textDocument: {
                    synchronization: { dynamicRegistration: false, didSave: false },
                    completion: { dynamicRegistration: false, completionItem: { snippetSupport: false } },
                    inlineCompletion: { dynamicRegistration: false },
                },
                window: { workDoneProgress: false },
            },
            initializationOptions,
        }) as Promise<InitializeResult>,
    ]);
    await connection.sendNotification('initialized', {});

    return {
        connection,
        initializeResult,
        initializationOptions,
        statuses,
        sent,
        log: () => stderr,
        waitForStatus(match, timeoutMs) {
            return new Promise<StatusParams>((resolveStatus, reject) => {
                const timer = setTimeout(() => {
                    reject(
                        new Error(
                            `no matching umbra/status within ${timeoutMs} ms; got ${JSON.stringify(statuses)}\n` +
                                `server log:\n${stderr}`,
                        ),
                    );
                }, timeoutMs);
                const check = () => {
                    const found = statuses.find(match);
                    if (found !== undefined) {
                        clearTimeout(timer);
                        resolveStatus(found);
                    } else {
                        waiters.push(check);
                    }
                };
                check();
                void exited.then((code) => {
                    clearTimeout(timer);
                    reject(new Error(`the server exited (${code}) while waiting for umbra/status:\n${stderr}`));
                });
            });
        },
        async shutdown(timeoutMs) {
            await connection.sendRequest('shutdown');
            await connection.sendNotification('exit');
            let timer: NodeJS.Timeout | undefined;
            const timeout = new Promise<never>((_, reject) => {
                timer = setTimeout(() => reject(new Error(`the server did not exit within ${timeoutMs} ms after exit`)), timeoutMs);
            });
            try {
                return await Promise.race([exited, timeout]);
            } finally {
                clearTimeout(timer);
                connection.dispose();
            }
        },
        kill() {
            connection.dispose();
            if (child.exitCode === null && child.signalCode === null) {
                child.kill('SIGTERM');
            }
        },
    };
}
