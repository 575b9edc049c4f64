// Typed settings of the extension and the initializationOptions the language server receives:
// reading them (readSettings), the server's options, when a change needs a restart. The schema
// (types, defaults, keys) is settingsSchema.ts, each value's validation settingsValidator.ts,
// path variables settingsPaths.ts; this module re-exports them, so importers need only this one.
//
// Pure: nothing here imports `vscode`, so node tests load it directly. The extension passes a
// `vscode.WorkspaceConfiguration` for section "umbra"; tests pass any object with the same
// `get(key, default)` shape.
//
// The cloud bearer token is deliberately absent: it lives in the OS keyring or in the
// environment variable named by `cloud.tokenEnv`, never in VS Code settings.

import { PathContext } from './settingsPaths';
import { Validator } from './settingsValidator';
import { ConfigSource, InitializationOptions, InspectedSetting, MODEL_DTYPES, UmbraSettings } from './settingsSchema';

export * from './settingsSchema';
export { expandPath } from './settingsPaths';
export type { PathContext } from './settingsPaths';

/** One or more settings have values the extension cannot use. */
export class SettingsError extends Error {
    constructor(readonly problems: string[]) {
        super(`Invalid Umbra settings:\n${problems.map((p) => `  umbra.${p}`).join('\n')}`);
        this.name = 'SettingsError';
    }
}

export const LIMITS = Object.freeze({
    debounceMs: { min: 0, max: 10_000 },
    maxTokens: { min: 1, max: 4096 },
    contextTokens: { min: 1, max: 1_000_000 },
    deadlineMs: { min: 0, max: 600_000 },
    threads: { min: 1, max: 1024 },
});

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
            dtype: v.choice('model.dtype', MODEL_DTYPES),
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
        inline: {
            deadlineMs: v.int('inline.deadlineMs', LIMITS.deadlineMs.min, LIMITS.deadlineMs.max),
            deadlineGraceMs: v.int('inline.deadlineGraceMs', LIMITS.deadlineMs.min, LIMITS.deadlineMs.max),
        },
        context: { enabled: v.bool('context.enabled') },
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
        model: { dir: s.model.dir, bundle: s.model.bundle, keyringService: s.model.keyringService, dtype: s.model.dtype },
        cloud: { url: s.cloud.url, certificate: s.cloud.certificate, tokenEnv: s.cloud.tokenEnv },
        completion: {
            maxTokens: s.completion.maxTokens,
            multiline: s.completion.multiline,
            temperature: s.completion.temperature,
            topP: s.completion.topP,
            contextTokens: s.completion.contextTokens,
        },
        inline: { deadlineMs: s.inline.deadlineMs, deadlineGraceMs: s.inline.deadlineGraceMs },
        // the globs the client never syncs, so that the server never takes such a file (an
        // imported one it reads from disk included) as context either
        context: { enabled: s.context.enabled, exclude: [...s.exclude] },
        threads: s.threads,
        allowUndefendedRemoteCloud: s.allowUndefendedRemoteCloud,
        clientOnly: s.clientOnly,
    };
}

/** What going from `before` to `after` takes:
 * - 'restart': a new server process — the first start, `enable`, how the server is started, or
 *   (`languages`, `exclude`) which documents the client syncs to it: a newly excluded document
 *   the server already holds is dropped only by starting it afresh;
 * - 'reconfigure': only the initializationOptions changed — the running server takes them in a
 *   `workspace/didChangeConfiguration` notification and keeps its documents (and, for the
 *   completion options, its model and cloud);
 * - 'none': nothing the server sees (`debounceMs` is read on every request). */
export type SettingsChange = 'restart' | 'reconfigure' | 'none';

export function settingsChange(before: UmbraSettings | undefined, after: UmbraSettings): SettingsChange {
    if (before === undefined) {
        return 'restart';
    }
    const processKey = (s: UmbraSettings) =>
        JSON.stringify([s.enable, s.languages, s.exclude, s.server.path, s.server.args, s.server.python]);
    if (processKey(before) !== processKey(after)) {
        return 'restart';
    }
    const options = (s: UmbraSettings) => JSON.stringify(toInitializationOptions(s));
    return options(before) !== options(after) ? 'reconfigure' : 'none';
}

/** Where "Umbra: Toggle Completions" writes `umbra.enable`: the workspace's settings when they
 * set it (a user-level value would not win over them), else the user's settings. */
export function toggleTarget(inspected: InspectedSetting | undefined): 'workspace' | 'global' {
    return inspected?.workspaceValue !== undefined ? 'workspace' : 'global';
}
