import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import {
    ConfigSource,
    DEFAULTS,
    SETTING_KEYS,
    SettingsError,
    defaultOf,
    expandPath,
    settingsChange,
    readSettings,
    toInitializationOptions,
    toggleTarget,
} from '../settings';
import { DEFAULT_EXCLUDE } from '../exclusions';

/** A configuration with some keys set, like a user's settings.json under "umbra". */
function config(values: Record<string, unknown> = {}): ConfigSource {
    return {
        get<T>(key: string, defaultValue: T): T {
            return (Object.prototype.hasOwnProperty.call(values, key) ? values[key] : defaultValue) as T;
        },
    };
}

function problemsOf(values: Record<string, unknown>): string[] {
    try {
        readSettings(config(values), { workspaceFolder: '/ws', userHome: '/home/u' });
    } catch (error) {
        assert.ok(error instanceof SettingsError);
        return error.problems;
    }
    assert.fail(`expected ${JSON.stringify(values)} to be rejected`);
}

describe('settings → initializationOptions', () => {
    it('defaults give the exact contract shape', () => {
        const options = toInitializationOptions(readSettings(config()));
        assert.deepStrictEqual(options, {
            model: { dir: null, bundle: null, keyringService: 'umbra', dtype: 'fp32' },
            cloud: { url: null, certificate: null, tokenEnv: 'UMBRA_CLOUD_TOKEN' },
            completion: { maxTokens: 64, multiline: 'auto', temperature: 0.0, topP: 1.0, contextTokens: 1024 },
            inline: { deadlineMs: 250, deadlineGraceMs: 1750 },
            context: { enabled: false, exclude: [...DEFAULT_EXCLUDE] },
            threads: null,
            allowUndefendedRemoteCloud: false,
            clientOnly: false,
        });
        // camelCase keys, nothing else: the JSON the server receives
        assert.equal(
            JSON.stringify(options),
            '{"model":{"dir":null,"bundle":null,"keyringService":"umbra","dtype":"fp32"},' +
                '"cloud":{"url":null,"certificate":null,"tokenEnv":"UMBRA_CLOUD_TOKEN"},' +
                '"completion":{"maxTokens":64,"multiline":"auto","temperature":0,"topP":1,"contextTokens":1024},' +
                `"inline":{"deadlineMs":250,"deadlineGraceMs":1750},"context":{"enabled":false,"exclude":${JSON.stringify(DEFAULT_EXCLUDE)}},` +
                '"threads":null,"allowUndefendedRemoteCloud":false,"clientOnly":false}',
        );
    });

    it('defaults of the extension-only settings', () => {
        const s = readSettings(config());
        assert.equal(s.enable, true);
        assert.equal(s.debounceMs, null); // adaptive
        assert.equal(readSettings(config({ debounceMs: 250 })).debounceMs, 250);
        assert.deepStrictEqual(s.exclude, [...DEFAULT_EXCLUDE]);
        assert.deepStrictEqual(s.languages, ['python', 'go', 'java']);
        assert.deepStrictEqual(readSettings(config({ languages: ['typescript', 'python'] })).languages, ['typescript', 'python']);
        assert.deepStrictEqual(s.server, { path: 'umbra', args: [], python: null });
    });

    it('carries every override through', () => {
        const s = readSettings(
            config({
                'model.dir': '/models/tiny',
                'model.bundle': '~/bundles/b1',
                'model.keyringService': 'umbra-test',
                'model.dtype': 'bf16',
                'cloud.url': 'https://cloud.example:8443',
                'cloud.certificate': '${workspaceFolder}/cloud.pem',
                'cloud.tokenEnv': 'MY_TOKEN',
                'completion.maxTokens': 128,
                'completion.multiline': true,
                'completion.temperature': 0.2,
                'completion.topP': 0.95,
                'completion.contextTokens': 2048,
                'inline.deadlineMs': 0,
                'inline.deadlineGraceMs': 0,
                'context.enabled': true,
                exclude: ['**/secrets/**', '*.local.py'],
                threads: 2,
                allowUndefendedRemoteCloud: true,
                clientOnly: true,
                debounceMs: 0,
                enable: false,
            }),
            { workspaceFolder: '/ws', userHome: '/home/u' },
        );
        assert.deepStrictEqual(toInitializationOptions(s), {
            model: { dir: '/models/tiny', bundle: '/home/u/bundles/b1', keyringService: 'umbra-test', dtype: 'bf16' },
            cloud: { url: 'https://cloud.example:8443', certificate: '/ws/cloud.pem', tokenEnv: 'MY_TOKEN' },
            completion: { maxTokens: 128, multiline: true, temperature: 0.2, topP: 0.95, contextTokens: 2048 },
            inline: { deadlineMs: 0, deadlineGraceMs: 0 },
            context: { enabled: true, exclude: ['**/secrets/**', '*.local.py'] },
            threads: 2,
            allowUndefendedRemoteCloud: true,
            clientOnly: true,
        });
        assert.equal(s.debounceMs, 0);
        assert.equal(s.enable, false);
    });

    it('forwards umbra.exclude to the server as context.exclude, merged with the workspace\'s', () => {
        const scoped: ConfigSource = {
            get<T>(key: string, defaultValue: T): T {
                return (key === 'exclude' ? ['**/user/**', '**/team/**'] : defaultValue) as T;
            },
            inspect(key: string) {
                return key === 'exclude'
                    ? { defaultValue: [...DEFAULT_EXCLUDE], globalValue: ['**/user/**'], workspaceValue: ['**/team/**'] }
                    : undefined;
            },
        };
        const s = readSettings(scoped);
        assert.deepStrictEqual(toInitializationOptions(s).context.exclude, s.exclude);
        assert.ok(s.exclude.includes('**/user/**') && s.exclude.includes('**/team/**'), JSON.stringify(s.exclude));
        // a change of the globs restarts the server, which then gets the new ones
        assert.equal(settingsChange(s, { ...s, exclude: [...s.exclude, '*.secret.py'] }), 'restart');
    });

    it('treats empty strings of optional settings as unset', () => {
        const s = readSettings(config({ 'model.dir': '', 'cloud.url': '', 'server.python': '  ', 'cloud.certificate': '' }));
        assert.equal(s.model.dir, null);
        assert.equal(s.cloud.url, null);
        assert.equal(s.server.python, null);
        assert.equal(s.cloud.certificate, null);
    });

    it('never contains a token', () => {
        const options = JSON.stringify(toInitializationOptions(readSettings(config())));
        assert.ok(!/"token"\s*:/i.test(options));
        assert.ok(!SETTING_KEYS.some((k) => /token$/i.test(k) && k !== 'cloud.tokenEnv'));
    });
});

describe('settings validation', () => {
    const cases: [string, Record<string, unknown>, RegExp][] = [
        ['maxTokens 0', { 'completion.maxTokens': 0 }, /^completion\.maxTokens must be an integer in \[1, 4096\], got 0$/],
        ['maxTokens fractional', { 'completion.maxTokens': 2.5 }, /completion\.maxTokens/],
        ['maxTokens string', { 'completion.maxTokens': '64' }, /completion\.maxTokens .* got "64"/],
        ['temperature negative', { 'completion.temperature': -0.1 }, /completion\.temperature must be a number >= 0/],
        ['temperature NaN', { 'completion.temperature': Number.NaN }, /completion\.temperature/],
        ['topP 0', { 'completion.topP': 0 }, /completion\.topP must be a number in \(0, 1\]/],
        ['topP above 1', { 'completion.topP': 1.5 }, /completion\.topP/],
        ['contextTokens 0', { 'completion.contextTokens': 0 }, /completion\.contextTokens/],
        ['deadlineMs -1', { 'inline.deadlineMs': -1 }, /inline\.deadlineMs/],
        ['deadlineGraceMs 1.5', { 'inline.deadlineGraceMs': 1.5 }, /inline\.deadlineGraceMs/],
        ['multiline string', { 'completion.multiline': 'yes' }, /completion\.multiline must be true, false or "auto"/],
        ['threads 0', { threads: 0 }, /threads must be null or an integer/],
        ['threads string', { threads: 'auto' }, /threads/],
        ['debounce negative', { debounceMs: -1 }, /debounceMs must be null or an integer in \[0, 10000\]/],
        ['debounce as a string', { debounceMs: 'adaptive' }, /debounceMs must be null or an integer/],
        ['an empty exclude pattern', { exclude: ['**/*.pem', ' '] }, /^exclude must be an array of non-empty glob patterns/],
        ['exclude as a string', { exclude: '**/.env' }, /^exclude must be an array/],
        ['enable string', { enable: 'true' }, /enable must be true or false/],
        ['cloud url ftp', { 'cloud.url': 'ftp://cloud' }, /cloud\.url must be null or an http\(s\) URL/],
        ['cloud url garbage', { 'cloud.url': 'not a url' }, /cloud\.url/],
        ['tokenEnv with $', { 'cloud.tokenEnv': '$TOKEN' }, /cloud\.tokenEnv must be an environment variable name/],
        ['tokenEnv empty', { 'cloud.tokenEnv': '' }, /cloud\.tokenEnv/],
        ['keyringService empty', { 'model.keyringService': ' ' }, /model\.keyringService must be a non-empty string/],
        ['server path empty', { 'server.path': '' }, /server\.path must be a non-empty path/],
        ['server args not strings', { 'server.args': ['--x', 3] }, /server\.args must be an array of strings/],
        ['server args string', { 'server.args': '--verbose' }, /server\.args/],
        ['model dir number', { 'model.dir': 3 }, /model\.dir must be null or a path/],
        ['a dtype the client cannot run', { 'model.dtype': 'fp16' }, /model\.dtype must be "fp32" or "bf16"/],
        ['an unknown language', { languages: ['python', 'cobol'] }, /^languages must be a non-empty list of distinct ids from python, go, java, javascript, typescript, got/],
        ['a repeated language', { languages: ['go', 'go'] }, /^languages must be a non-empty list/],
        ['no language', { languages: [] }, /^languages must be a non-empty list/],
        ['languages as a string', { languages: 'python' }, /^languages must be/],
    ];
    for (const [name, values, expected] of cases) {
        it(`rejects ${name}`, () => {
            const problems = problemsOf(values);
            assert.equal(problems.length, 1, problems.join('\n'));
            assert.match(problems[0], expected);
        });
    }

    it('rejects a certificate without a cloud URL', () => {
        const problems = problemsOf({ 'cloud.certificate': '/etc/cloud.pem' });
        assert.deepStrictEqual(problems.length, 1);
        assert.match(problems[0], /^cloud\.certificate applies to a configured umbra\.cloud\.url only/);
    });

    it('reports every problem at once, each under umbra.', () => {
        try {
            readSettings(config({ 'completion.topP': 0, threads: -2, 'cloud.url': 'x' }));
            assert.fail('should throw');
        } catch (error) {
            assert.ok(error instanceof SettingsError);
            assert.equal(error.problems.length, 3);
            assert.match(error.message, /umbra\.completion\.topP/);
            assert.match(error.message, /umbra\.threads/);
            assert.match(error.message, /umbra\.cloud\.url/);
        }
    });

    it('rejects a variable it cannot resolve', () => {
        const problems = (() => {
            try {
                readSettings(config({ 'model.dir': '${workspaceFolder}/m' }), { userHome: '/home/u' });
                return [];
            } catch (error) {
                return (error as SettingsError).problems;
            }
        })();
        assert.equal(problems.length, 1);
        assert.match(problems[0], /^model\.dir uses/);
    });
});

describe('path expansion', () => {
    const ctx = { workspaceFolder: '/ws', userHome: '/home/u' };
    it('expands the known variables and a leading ~', () => {
        assert.equal(expandPath('${workspaceFolder}/.venv/bin/python', ctx), '/ws/.venv/bin/python');
        assert.equal(expandPath('${userHome}/x', ctx), '/home/u/x');
        assert.equal(expandPath('~/x', ctx), '/home/u/x');
        assert.equal(expandPath('~', ctx), '/home/u');
    });
    it('leaves everything else alone', () => {
        assert.equal(expandPath('/a/~b/${other}', ctx), '/a/~b/${other}');
        assert.equal(expandPath('umbra', ctx), 'umbra');
    });
    it('returns null for an unknown context value', () => {
        assert.equal(expandPath('~/x', {}), null);
        assert.equal(expandPath('${workspaceFolder}', { userHome: '/h' }), null);
    });
});

describe('restart decisions', () => {
    const base = readSettings(config());
    it('restarts on first start, on how the server starts and on which documents it is sent', () => {
        assert.equal(settingsChange(undefined, base), 'restart');
        assert.equal(settingsChange(base, readSettings(config({ 'server.args': ['-v'] }))), 'restart');
        assert.equal(settingsChange(base, readSettings(config({ enable: false }))), 'restart');
        assert.equal(settingsChange(base, readSettings(config({ languages: ['python'] }))), 'restart');
        // which documents are synced: an excluded one the server holds goes only with a restart
        assert.equal(settingsChange(base, readSettings(config({ exclude: ['**/secrets/**'] }))), 'restart');
    });
    it('sends the running server anything else it sees as new options', () => {
        assert.equal(settingsChange(base, readSettings(config({ 'completion.maxTokens': 10 }))), 'reconfigure');
        assert.equal(settingsChange(base, readSettings(config({ 'inline.deadlineMs': 100 }))), 'reconfigure');
        assert.equal(settingsChange(base, readSettings(config({ clientOnly: true }))), 'reconfigure');
        assert.equal(settingsChange(base, readSettings(config({ 'model.dir': '/models/other' }))), 'reconfigure');
    });
    it('does nothing for the debounce delay', () => {
        assert.equal(settingsChange(base, readSettings(config({ debounceMs: 20 }))), 'none');
        assert.equal(settingsChange(base, readSettings(config())), 'none');
    });
});

describe('umbra.exclude across scopes', () => {
    /** A configuration with values per scope, like vscode's WorkspaceConfiguration.inspect. */
    function scoped(user: unknown, workspace: unknown): ConfigSource {
        const inspected = { defaultValue: defaultOf('exclude'), globalValue: user, workspaceValue: workspace };
        return {
            get: <T>(key: string, d: T) => (key === 'exclude' ? (workspace ?? user ?? d) : d) as T,
            inspect: (key: string) => (key === 'exclude' ? inspected : undefined),
        };
    }

    it('a workspace adds patterns to the default and cannot remove any', () => {
        const s = readSettings(scoped(undefined, []));
        assert.deepStrictEqual(s.exclude, [...DEFAULT_EXCLUDE], 'an empty workspace list removes nothing');
        const more = readSettings(scoped(undefined, ['**/secrets/**', '**/*.pem']));
        assert.deepStrictEqual(more.exclude, [...DEFAULT_EXCLUDE, '**/secrets/**']);
    });

    it("the user's own list replaces the default; the workspace's adds to it", () => {
        assert.deepStrictEqual(readSettings(scoped([], undefined)).exclude, []);
        assert.deepStrictEqual(readSettings(scoped(['**/*.pem'], ['**/.env'])).exclude, ['**/*.pem', '**/.env']);
    });

    it('rejects a bad value in any scope', () => {
        assert.throws(() => readSettings(scoped(undefined, ['ok', 3])), /exclude must be an array of non-empty glob patterns/);
    });
});

describe('the toggle', () => {
    it('writes where umbra.enable is decided: the workspace when it sets it, else the user', () => {
        assert.equal(toggleTarget(undefined), 'global');
        assert.equal(toggleTarget({ globalValue: false }), 'global');
        assert.equal(toggleTarget({ globalValue: true, workspaceValue: false }), 'workspace');
    });
});

describe('defaults table', () => {
    it('has a default for every key', () => {
        for (const key of SETTING_KEYS) {
            assert.notEqual(defaultOf(key), undefined, key);
        }
        assert.equal(defaultOf('completion.topP'), DEFAULTS.completion.topP);
    });
});
