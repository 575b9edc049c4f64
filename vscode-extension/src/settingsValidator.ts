// Validation of each setting's raw value, collecting every problem (settings.ts reports them
// at once). Pure: `source` is any object with the shape of vscode's WorkspaceConfiguration.

import { DEFAULT_EXCLUDE } from './exclusions';
import { LANGUAGES, Language, isLanguage } from './languages';
import { PathContext, expandPath } from './settingsPaths';
import { ConfigSource, SettingKey, defaultOf } from './settingsSchema';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export class Validator {
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

    /** One of `choices` (a string setting with a fixed set of values). */
    choice<T extends string>(key: SettingKey, choices: readonly T[]): T {
        const value = this.raw(key);
        const expected = choices.map((c) => `"${c}"`).join(' or ');
        return choices.includes(value as T) ? (value as T) : this.fail(key, expected, value, choices[0]);
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
