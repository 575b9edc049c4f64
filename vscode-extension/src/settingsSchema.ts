// The settings' schema: the typed settings, their defaults and every key under `umbra.`, and
// the initializationOptions shape the language server receives. Pure (no `vscode` import).

import { DEFAULT_EXCLUDE } from './exclusions';
import { DEFAULT_LANGUAGES, Language } from './languages';

/** What the extension reads settings from: `vscode.workspace.getConfiguration('umbra')`. */
export interface ConfigSource {
    get<T>(key: string, defaultValue: T): T;
    /** The value per scope (vscode's WorkspaceConfiguration has it); used for `exclude`. */
    inspect?(key: string): (InspectedSetting & { defaultValue?: unknown }) | undefined;
}

export interface ServerSettings {
    /** Executable of the Umbra CLI; the server is `<path> lsp <args...>`. */
    path: string;
    /** Extra arguments after `lsp`. */
    args: string[];
    /** When set, the server is `<python> -m lsp <args...>` instead. */
    python: string | null;
}

/** The client's compute dtype, and the hidden states' on the wire (a cloud the server starts computes in it). */
export type ModelDtype = 'fp32' | 'bf16';
export const MODEL_DTYPES: readonly ModelDtype[] = ['fp32', 'bf16'];

export interface ModelSettings {
    dir: string | null;
    bundle: string | null;
    keyringService: string;
    dtype: ModelDtype;
}

export interface CloudSettings {
    url: string | null;
    certificate: string | null;
    tokenEnv: string;
}

export interface CompletionSettings {
    maxTokens: number;
    multiline: boolean | 'auto';
    temperature: number;
    topP: number;
    contextTokens: number;
}

export interface InlineSettings {
    /** Milliseconds after a request's arrival at which the server's decode stops and the text so
     * far is the answer (trimmed to a whole line or word); 0: no deadline. */
    deadlineMs: number;
    /** Past the deadline, how many more milliseconds a decode whose text holds no whole word yet
     * may go on to its first one; 0: the answer is cut at the deadline. */
    deadlineGraceMs: number;
}

export interface ContextSettings {
    /** Snippets of the other open documents (and of the files the current one imports) in the
     * prompt; never from a file `exclude` matches (the server is sent the same globs). */
    enabled: boolean;
}

export interface UmbraSettings {
    enable: boolean;
    /** The editor languages completed; others get no ghost text and are not sent to the server. */
    languages: Language[];
    /** Globs of files never synced to the server and never completed (exclusions.ts). */
    exclude: string[];
    /** A fixed debounce, or null: adaptive from measured latency (debounce.ts). */
    debounceMs: number | null;
    server: ServerSettings;
    model: ModelSettings;
    cloud: CloudSettings;
    completion: CompletionSettings;
    inline: InlineSettings;
    context: ContextSettings;
    threads: number | null;
    /** Send hidden states whose privacy mode is not defended to a cloud not on this machine
     * (private by default: off, and the server refuses such a cloud). */
    allowUndefendedRemoteCloud: boolean;
    /** Complete with the client's blocks alone (the middle skipped): no cloud connection at all,
     * nothing sent anywhere; `cloud` is then unused. */
    clientOnly: boolean;
}

/** The `initializationOptions` of the server contract, field for field. */
export interface InitializationOptions {
    model: { dir: string | null; bundle: string | null; keyringService: string; dtype: ModelDtype };
    cloud: { url: string | null; certificate: string | null; tokenEnv: string };
    completion: {
        maxTokens: number;
        multiline: boolean | 'auto';
        temperature: number;
        topP: number;
        contextTokens: number;
    };
    inline: { deadlineMs: number; deadlineGraceMs: number };
    /** `umbra.context.enabled`, and `umbra.exclude` as the server's exclusion globs. */
    context: { enabled: boolean; exclude: string[] };
    threads: number | null;
    allowUndefendedRemoteCloud: boolean;
    clientOnly: boolean;
}

/** Defaults of every setting; package.json `contributes.configuration` repeats them (a test
 * checks that the two agree). */
export const DEFAULTS: Readonly<UmbraSettings> = Object.freeze({
    enable: true,
    languages: [...DEFAULT_LANGUAGES],
    exclude: [...DEFAULT_EXCLUDE],
    debounceMs: null,
    server: { path: 'umbra', args: [], python: null },
    model: { dir: null, bundle: null, keyringService: 'umbra', dtype: 'fp32' as const },
    cloud: { url: null, certificate: null, tokenEnv: 'UMBRA_CLOUD_TOKEN' },
    completion: { maxTokens: 64, multiline: 'auto' as const, temperature: 0.0, topP: 1.0, contextTokens: 1024 },
    inline: { deadlineMs: 250, deadlineGraceMs: 1750 },
    context: { enabled: false },
    threads: null,
    allowUndefendedRemoteCloud: false,
    clientOnly: false,
});

/** Every setting key under the `umbra.` section, as it appears in package.json. */
export const SETTING_KEYS = [
    'enable',
    'languages',
    'exclude',
    'debounceMs',
    'server.path',
    'server.args',
    'server.python',
    'model.dir',
    'model.bundle',
    'model.keyringService',
    'model.dtype',
    'cloud.url',
    'cloud.certificate',
    'cloud.tokenEnv',
    'completion.maxTokens',
    'completion.multiline',
    'completion.temperature',
    'completion.topP',
    'completion.contextTokens',
    'inline.deadlineMs',
    'inline.deadlineGraceMs',
    'context.enabled',
    'threads',
    'allowUndefendedRemoteCloud',
    'clientOnly',
] as const;

export type SettingKey = (typeof SETTING_KEYS)[number];

/** Default value of one setting key, read from DEFAULTS. */
export function defaultOf(key: SettingKey): unknown {
    let node: unknown = DEFAULTS;
    for (const part of key.split('.')) {
        node = (node as Record<string, unknown>)[part];
    }
    return node;
}

/** The values of one setting per scope (the shape of `WorkspaceConfiguration.inspect`). */
export interface InspectedSetting {
    globalValue?: unknown;
    workspaceValue?: unknown;
    workspaceFolderValue?: unknown;
}
