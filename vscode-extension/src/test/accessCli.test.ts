import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, it } from 'node:test';
import {
    AccessCommandError,
    ShellKind,
    accessArgv,
    cliCommand,
    commandLine,
    quoteArg,
    shellKind,
    validateAccessKeyName,
} from '../accessCli';
import { ConfigSource, readSettings } from '../settings';

function settings(values: Record<string, unknown> = {}) {
    const source: ConfigSource = {
        get: <T>(key: string, d: T) => (key in values ? values[key] : d) as T,
    };
    return readSettings(source, { workspaceFolder: '/ws', userHome: '/home/u' });
}

describe('access key names', () => {
    it('accepts what the CLI accepts', () => {
        for (const name of ['team-a', 'a', '0', 'Team_A.v2', 'x'.repeat(64), '9-._']) {
            assert.equal(validateAccessKeyName(name), undefined, name);
        }
    });

    it('refuses the rest, saying why', () => {
        assert.match(validateAccessKeyName('') ?? '', /Enter the name/);
        assert.match(validateAccessKeyName('x'.repeat(65)) ?? '', /At most 64/);
        for (const name of ['-team', '.team', '_team', ' team']) {
            assert.match(validateAccessKeyName(name) ?? '', /Start with a letter or a digit/, name);
        }
        for (const name of ['team a', 'team/a', "team'a", 'team;rm', 'team$(x)', 'téam', 'team\n', 'team\u0000']) {
            assert.match(validateAccessKeyName(name) ?? '', /letters, digits/, JSON.stringify(name));
        }
    });
});

describe('access command lines', () => {
    it('uses the same CLI as the server: umbra.server.path, or the interpreter', () => {
        assert.deepStrictEqual(cliCommand(settings().server), ['umbra']);
        assert.deepStrictEqual(cliCommand(settings({ 'server.path': '~/bin/umbra', 'server.args': ['--x'] }).server), ['/home/u/bin/umbra']);
        assert.deepStrictEqual(cliCommand(settings({ 'server.python': '${workspaceFolder}/.venv/bin/python' }).server), [
            '/ws/.venv/bin/python',
            '-m',
            'umbra.cli.main',
        ]);
    });

    it('rotates NAME of the bundle, status of the bundle', () => {
        const s = settings();
        assert.deepStrictEqual(accessArgv(s.server, '/b', s.model.keyringService, { kind: 'rotate', name: 'team-a' }), [
            'umbra', 'keys', 'access', 'rotate', 'team-a', '--bundle', '/b',
        ]);
        assert.deepStrictEqual(accessArgv(s.server, '/b', s.model.keyringService, { kind: 'status' }), [
            'umbra', 'keys', 'access', 'status', '--bundle', '/b',
        ]);
    });

    it('names a keyring service other than the default', () => {
        const s = settings({ 'server.python': '/py', 'model.keyringService': 'work' });
        assert.deepStrictEqual(accessArgv(s.server, '/b', s.model.keyringService, { kind: 'status' }), [
            '/py', '-m', 'umbra.cli.main', 'keys', 'access', 'status', '--bundle', '/b', '--service', 'work',
        ]);
    });

    it('never builds a command for an invalid name', () => {
        const s = settings();
        for (const name of ['', '-x', 'a b', 'a;b']) {
            assert.throws(() => accessArgv(s.server, '/b', 'umbra', { kind: 'rotate', name }), AccessCommandError, name);
        }
    });
});

describe('shells', () => {
    it('recognizes the shell of the default terminal profile', () => {
        const cases: [string | undefined, string, ShellKind][] = [
            ['/bin/bash', 'linux', 'posix'],
            ['/usr/bin/zsh', 'darwin', 'posix'],
            ['/opt/homebrew/bin/fish', 'darwin', 'fish'],
            ['C:\\Windows\\System32\\WindowsPowerShell\\v1.0\\powershell.exe', 'win32', 'powershell'],
            ['C:\\Program Files\\PowerShell\\7\\pwsh.exe', 'win32', 'powershell'],
            ['/usr/local/bin/pwsh', 'linux', 'powershell'],
            ['C:\\Windows\\System32\\cmd.exe', 'win32', 'cmd'],
            ['C:\\Program Files\\Git\\bin\\bash.exe', 'win32', 'posix'],
            ['', 'win32', 'powershell'],
            [undefined, 'linux', 'posix'],
            ['/usr/bin/nu', 'linux', 'posix'],
        ];
        for (const [path, platform, kind] of cases) {
            assert.equal(shellKind(path, platform), kind, `${path} on ${platform}`);
        }
    });

    it('leaves plain words alone', () => {
        for (const kind of ['posix', 'fish', 'cmd'] as const) {
            assert.equal(commandLine(['umbra', 'keys', 'access', 'rotate', 'team-a', '--bundle', '/b/c'], kind),
                'umbra keys access rotate team-a --bundle /b/c');
        }
        assert.equal(commandLine(['umbra', 'keys', 'access', 'rotate', 'team-a', '--bundle', 'C:\\b'], 'powershell'),
            '& umbra keys access rotate team-a --bundle C:\\b');
    });

    it('quotes paths with spaces and quotes for each shell', () => {
        const path = "/home/u/my bundles/o'brien $HOME `x` ;|&";
        assert.equal(quoteArg(path, 'posix'), `'/home/u/my bundles/o'\\''brien $HOME \`x\` ;|&'`);
        assert.equal(quoteArg('C:\\my\\bundle\\', 'fish'), "'C:\\\\my\\\\bundle\\\\'");
        assert.equal(quoteArg("it's", 'fish'), "'it\\'s'");
        assert.equal(quoteArg("C:\\Users\\o'brien\\b $env:X", 'powershell'), "'C:\\Users\\o''brien\\b $env:X'");
        assert.equal(quoteArg('it\u2019s', 'powershell'), "'it\u2019\u2019s'");
        assert.equal(quoteArg('C:\\my bundle & co', 'cmd'), '"C:\\my bundle & co"');
        assert.equal(quoteArg('', 'posix'), "''");
        assert.equal(commandLine(['/opt/my tools/umbra', 'keys'], 'powershell'), "& '/opt/my tools/umbra' keys");
        assert.equal(commandLine(['0x10'], 'powershell'), "& '0x10'");
    });

    it('refuses what a shell cannot take intact', () => {
        for (const kind of ['posix', 'fish', 'powershell', 'cmd'] as const) {
            assert.throws(() => quoteArg('/b\nrm -rf ~', kind), AccessCommandError, kind);
            assert.throws(() => quoteArg('/b\r', kind), AccessCommandError, kind);
        }
        assert.throws(() => quoteArg('a"b', 'powershell'), AccessCommandError);
        assert.throws(() => quoteArg('a"b', 'cmd'), AccessCommandError);
        assert.throws(() => quoteArg('%PATH%', 'cmd'), AccessCommandError);
    });

    it('a POSIX shell reads every quoted word back exactly', { skip: process.platform === 'win32' }, () => {
        const words = ['/home/u/my bundles', "o'brien", '$HOME', '`id`', '$(id)', 'a\\b', '*', '~', '!x', '-n', '', 'two  spaces'];
        for (const shell of ['/bin/sh', '/bin/bash'].filter((p) => existsSync(p))) {
            const line = commandLine(['printf', '%s\\0', ...words], 'posix');
            const out = execFileSync(shell, ['-c', line], { encoding: 'utf8' });
            assert.deepStrictEqual(out.split('\0').slice(0, -1), words, shell);
        }
    });
});
