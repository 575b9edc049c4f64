// Typed settings of the extension and the initializationOptions the language server receives.
//
// Pure: nothing here imports `vscode`, so node tests load it directly. The extension passes a
// `vscode.WorkspaceConfiguration` for section "umbra"; tests pass any object with the same
// `get(key, default)` shape.
//
// The cloud bearer token is deliberately absent: it lives in the OS keyring or in the
// environment variable named by `cloud.tokenEnv`, never in VS Code settings.

import { DEFAULT_EXCLUDE } from './exclusions';
import { DEFAULT_LANGUAGES, LANGUAGES, Language, isLanguage } from './languages';

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

export interface ModelSettings {
    dir: string | null;
    bundle: string | null;
    keyringService: string;
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
    model: { dir: string | null; bundle: string | null; keyringService: string };
    cloud: { url: string | null; certificate: string | null; tokenEnv: string };
    completion: {
        maxTokens: number;
        multiline: boolean | 'auto';
        temperature: number;
        topP: number;
        contextTokens: number;
    };
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
    model: { dir: null, bundle: null, keyringService: 'umbra' },
    cloud: { url: null, certificate: null, tokenEnv: 'UMBRA_CLOUD_TOKEN' },
    completion: { maxTokens: 64, multiline: 'auto' as const, temperature: 0.0, topP: 1.0, contextTokens: 1024 },
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
    'cloud.url',
    'cloud.certificate',
    'cloud.tokenEnv',
    'completion.maxTokens',
    'completion.multiline',
    'completion.temperature',
    'completion.topP',
    'completion.contextTokens',
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

/** One or more settings have values the extension cannot use. */
export class SettingsError extends Error {
    constructor(readonly problems: string[]) {
        super(`Invalid Umbra settings:\n${problems.map((p) => `  umbra.${p}`).join('\n')}`);
        this.name = 'SettingsError';
    }
}

/** Values substituted into path settings: `${workspaceFolder}`, `${userHome}` and a leading `~`. */
export interface PathContext {
    workspaceFolder?: string;
    userHome?: string;
}

export const LIMITS = Object.freeze({
    debounceMs: { min: 0, max: 10_000 },
    maxTokens: { min: 1, max: 4096 },
    contextTokens: { min: 1, max: 1_000_000 },
    threads: { min: 1, max: 1024 },
});

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Reads and validates every setting. Throws SettingsError listing all problems at once. */
export function readSettings(source: ConfigSource, paths: PathContext = {}): UmbraSettings {
    const v = new Validator(source, paths);
    const settings: UmbraSettings = {
        enable: v.bool('enable'),
        languages: v.languages('languages'),
        exclude: v.globs('exclude'),
        debounceMs: v.optionalInt('debounceMs', LIMITS.debounceMs.min, LIMITS.debounceMs.max),
        server: {
            path: v.path('server.path'),
            args: v.stringList('server.args'),
            python: v.optionalPath('server.python'),
        },
        model: {
            dir: v.optionalPath('model.dir'),
            bundle: v.optionalPath('model.bundle'),
            keyringService: v.nonEmpty('model.keyringService'),
        },
        cloud: {
            url: v.optionalUrl('cloud.url'),
            certificate: v.optionalPath('cloud.certificate'),
            tokenEnv: v.envName('cloud.tokenEnv'),
        },
        completion: {
            maxTokens: v.int('completion.maxTokens', LIMITS.maxTokens.min, LIMITS.maxTokens.max),
            multiline: v.lineMode('completion.multiline'),
            temperature: v.number('completion.temperature', (x) => x >= 0, 'a number >= 0'),
            topP: v.number('completion.topP', (x) => x > 0 && x <= 1, 'a number in (0, 1]'),
            contextTokens: v.int('completion.contextTokens', LIMITS.contextTokens.min, LIMITS.contextTokens.max),
        },
        threads: v.optionalInt('threads', LIMITS.threads.min, LIMITS.threads.max),
        allowUndefendedRemoteCloud: v.bool('allowUndefendedRemoteCloud'),
        clientOnly: v.bool('clientOnly'),
    };
    if (settings.cloud.certificate !== null && settings.cloud.url === null) {
        v.problems.push('cloud.certificate applies to a configured umbra.cloud.url only (with no URL the cloud runs on loopback)');
    }
    if (v.problems.length > 0) {
        throw new SettingsError(v.problems);
    }
    return settings;
}

/** The initializationOptions of the server contract (camelCase JSON, exact shape). */
export function toInitializationOptions(s: UmbraSettings): InitializationOptions {
    return {
        model: { dir: s.model.dir, bundle: s.model.bundle, keyringService: s.model.keyringService },
        cloud: { url: s.cloud.url, certificate: s.cloud.certificate, tokenEnv: s.cloud.tokenEnv },
        completion: {
            maxTokens: s.completion.maxTokens,
            multiline: s.completion.multiline,
            temperature: s.completion.temperature,
            topP: s.completion.topP,
            contextTokens: s.completion.contextTokens,
        },
        threads: s.threads,
        allowUndefendedRemoteCloud: s.allowUndefendedRemoteCloud,
        clientOnly: s.clientOnly,
    };
}

/** True when going from `before` to `after` needs a new server process: anything but
 * `debounceMs` (read on every request) changes how the server is started or initialized, or
 * (`languages`, `exclude`) which documents the client syncs to it: a newly excluded document
 * the server already holds is dropped only by starting it afresh. */
export function needsRestart(before: UmbraSettings | undefined, after: UmbraSettings): boolean {
    if (before === undefined) {
        return true;
    }
    const key = (s: UmbraSettings) =>
        JSON.stringify([s.enable, s.languages, s.exclude, s.server.path, s.server.args, s.server.python, toInitializationOptions(s)]);
    return key(before) !== key(after);
}

/** The values of one setting per scope (the shape of `WorkspaceConfiguration.inspect`). */
export interface InspectedSetting {
    globalValue?: unknown;
    workspaceValue?: unknown;
    workspaceFolderValue?: unknown;
}

/** Where "Umbra: Toggle Completions" writes `umbra.enable`: the workspace's settings when they
 * set it (a user-level value would not win over them), else the user's settings. */
export function toggleTarget(inspected: InspectedSetting | undefined): 'workspace' | 'global' {
    return inspected?.workspaceValue !== undefined ? 'workspace' : 'global';
}

/** Substitutes `${workspaceFolder}`, `${userHome}` and a leading `~`; returns null when a
 * variable is used but unknown. */
export function expandPath(value: string, paths: PathContext): string | null {
    let unknown = false;
    let out = value.replace(/\$\{(workspaceFolder|userHome)\}/g, (_m, name: keyof PathContext) => {
        const replacement = paths[name];
        if (replacement === undefined) {
            unknown = true;
            return '';
        }
        return replacement;
    });
    if (unknown) {
        return null;
    }
    if (out === '~' || out.startsWith('~/')) {
        if (paths.userHome === undefined) {
            return null;
        }
        out = paths.userHome + out.slice(1);
    }
    return out;
}

class Validator {
    readonly problems: string[] = [];

    constructor(
        private readonly source: ConfigSource,
        private readonly paths: PathContext,
    ) {}

    private raw(key: SettingKey): unknown {
        return this.source.get<unknown>(key, defaultOf(key));
    }

    private fail<T>(key: SettingKey, expected: string, value: unknown, fallback: T): T {
        this.problems.push(`${key} must be ${expected}, got ${describe(value)}`);
        return fallback;
    }

    bool(key: SettingKey): boolean {
        const value = this.raw(key);
        return typeof value === 'boolean' ? value : this.fail(key, 'true or false', value, false);
    }

    /** true, false or 'auto' (completion.multiline). */
    lineMode(key: SettingKey): boolean | 'auto' {
        const value = this.raw(key);
        return typeof value === 'boolean' || value === 'auto' ? value : this.fail(key, 'true, false or "auto"', value, 'auto');
    }

    number(key: SettingKey, ok: (x: number) => boolean, expected: string): number {
        const value = this.raw(key);
        if (typeof value === 'number' && Number.isFinite(value) && ok(value)) {
            return value;
        }
        return this.fail(key, expected, value, 0);
    }

    int(key: SettingKey, min: number, max: number): number {
        const value = this.raw(key);
        if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) {
            return value;
        }
        return this.fail(key, `an integer in [${min}, ${max}]`, value, min);
    }

    optionalInt(key: SettingKey, min: number, max: number): number | null {
        const value = this.raw(key);
        if (value === null || value === undefined) {
            return null;
        }
        if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) {
            return value;
        }
        return this.fail(key, `null or an integer in [${min}, ${max}]`, value, null);
    }

    nonEmpty(key: SettingKey): string {
        const value = this.raw(key);
        if (typeof value === 'string' && value.trim() !== '') {
            return value.trim();
        }
        return this.fail(key, 'a non-empty string', value, '');
    }

    stringList(key: SettingKey): string[] {
        const value = this.raw(key);
        if (Array.isArray(value) && value.every((x) => typeof x === 'string')) {
            return [...value];
        }
        return this.fail(key, 'an array of strings', value, []);
    }

    /** A list of glob patterns, each a non-empty string (an empty list excludes nothing). The
     * user's value (or the default) plus what a workspace adds: a workspace's settings can
     * exclude more files, never fewer. */
    globs(key: SettingKey): string[] {
        const inspected = this.source.inspect?.(key);
        const layers = inspected
            ? [inspected.globalValue ?? inspected.defaultValue ?? defaultOf(key), inspected.workspaceValue, inspected.workspaceFolderValue]
            : [this.raw(key)];
        const out: string[] = [];
        for (const value of layers.filter((v) => v !== undefined)) {
            if (!Array.isArray(value) || !value.every((x) => typeof x === 'string' && x.trim() !== '')) {
                return this.fail(key, 'an array of non-empty glob patterns', value, [...DEFAULT_EXCLUDE]);
            }
            for (const glob of value.map((x: string) => x.trim())) {
                if (!out.includes(glob)) {
                    out.push(glob);
                }
            }
        }
        return out;
    }

    /** A non-empty list of distinct ids from LANGUAGES. */
    languages(key: SettingKey): Language[] {
        const value = this.raw(key);
        if (Array.isArray(value) && value.length > 0 && value.every(isLanguage) && new Set(value).size === value.length) {
            return [...value];
        }
        return this.fail(key, `a non-empty list of distinct ids from ${LANGUAGES.join(', ')}`, value, []);
    }

    envName(key: SettingKey): string {
        const value = this.raw(key);
        if (typeof value === 'string' && ENV_NAME.test(value)) {
            return value;
        }
        return this.fail(key, 'an environment variable name (letters, digits, _)', value, '');
    }

    /** A required path (or a bare executable name looked up on PATH). */
    path(key: SettingKey): string {
        const value = this.raw(key);
        if (typeof value !== 'string' || value.trim() === '') {
            return this.fail(key, 'a non-empty path', value, '');
        }
        return this.expand(key, value.trim()) ?? '';
    }

    /** An optional path: null, undefined and "" all mean unset. */
    optionalPath(key: SettingKey): string | null {
        const value = this.raw(key);
        if (value === null || value === undefined) {
            return null;
        }
        if (typeof value !== 'string') {
            return this.fail(key, 'null or a path', value, null);
        }
        if (value.trim() === '') {
            return null;
        }
        return this.expand(key, value.trim());
    }

    optionalUrl(key: SettingKey): string | null {
        const value = this.raw(key);
        if (value === null || value === undefined || value === '') {
            return null;
        }
        if (typeof value === 'string') {
            try {
                const url = new URL(value.trim());
                if ((url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '') {
                    return value.trim();
                }
            } catch {
                // reported below
            }
        }
        return this.fail(key, 'null or an http(s) URL', value, null);
    }

    private expand(key: SettingKey, value: string): string | null {
        const out = expandPath(value, this.paths);
        if (out === null) {
            this.problems.push(`${key} uses \${workspaceFolder}, \${userHome} or ~ but it is not known here`);
        }
        return out;
    }
}

function describe(value: unknown): string {
    if (value === undefined) {
        return 'nothing';
    }
    const text = JSON.stringify(value);
    return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
