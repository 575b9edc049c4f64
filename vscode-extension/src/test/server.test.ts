import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { describeCommand, serverCommand, serverEnvironment, serverOptions } from '../server';
import { ConfigSource, readSettings } from '../settings';

function server(values: Record<string, unknown>) {
    const source: ConfigSource = {
        get: <T>(key: string, d: T) => (key in values ? values[key] : d) as T,
    };
    return readSettings(source, { workspaceFolder: '/ws', userHome: '/home/u' }).server;
}

describe('server command', () => {
    it('defaults to `umbra lsp`', () => {
        assert.deepStrictEqual(serverCommand(server({})), { command: 'umbra', args: ['lsp'] });
    });

    it('uses server.path and appends server.args after lsp', () => {
        assert.deepStrictEqual(serverCommand(server({ 'server.path': '~/bin/umbra', 'server.args': ['--log-level', 'debug'] })), {
            command: '/home/u/bin/umbra',
            args: ['lsp', '--log-level', 'debug'],
        });
    });

    it('server.python runs `<python> -m lsp` and wins over server.path', () => {
        assert.deepStrictEqual(
            serverCommand(server({ 'server.path': '/x/umbra', 'server.python': '${workspaceFolder}/.venv/bin/python', 'server.args': ['-v'] })),
            { command: '/ws/.venv/bin/python', args: ['-m', 'lsp', '-v'] },
        );
    });

    it('builds stdio ServerOptions without a --stdio flag or transport', () => {
        const options = serverOptions(server({}), { PATH: '/usr/bin', UMBRA_CLOUD_TOKEN: 'kept' });
        assert.equal(options.command, 'umbra');
        assert.deepStrictEqual(options.args, ['lsp']);
        assert.equal(options.transport, undefined);
        assert.ok(!options.args?.includes('--stdio'));
        assert.equal(options.options?.env?.PATH, '/usr/bin');
    });

    it('inherits the environment (the token variable reaches the server) and adds unbuffered output', () => {
        const env = serverEnvironment({ PATH: '/bin', UMBRA_CLOUD_TOKEN: 't', UNSET: undefined });
        assert.deepStrictEqual(env, { PATH: '/bin', UMBRA_CLOUD_TOKEN: 't', PYTHONUNBUFFERED: '1' });
    });

    it('describes the command for the log, quoting where needed', () => {
        assert.equal(describeCommand(server({ 'server.path': '/opt/my tools/umbra' })), '"/opt/my tools/umbra" lsp');
        assert.equal(describeCommand(server({})), 'umbra lsp');
    });
});
