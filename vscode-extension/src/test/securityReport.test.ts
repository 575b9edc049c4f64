import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { CancellationTokenSource } from 'vscode-languageserver-protocol/node';
import { reportArgv, runCli } from '../securityReport';

const server = { path: '/opt/umbra/bin/umbra', args: ['--verbose'], python: null };

describe('the security report command line', () => {
    it('is `umbra audit report --out FILE` with the server\'s CLI (not its lsp arguments)', () => {
        assert.deepStrictEqual(reportArgv(server, '/s/umbra-audit.html', null), [
            '/opt/umbra/bin/umbra', 'audit', 'report', '--out', '/s/umbra-audit.html',
        ]);
        assert.deepStrictEqual(reportArgv({ ...server, python: '/venv/bin/python' }, '/s/r.html', 2), [
            '/venv/bin/python', '-m', 'umbra.cli.main', 'audit', 'report', '--out', '/s/r.html', '--threads', '2',
        ]);
    });

    it('takes a path with spaces as one argument (no shell)', async () => {
        const outcome = await runCli([process.execPath, '-e', 'console.log(process.argv.length, process.argv[1])', 'a b; rm -rf x'], {
            cwd: process.cwd(),
            env: process.env,
        });
        assert.deepStrictEqual(outcome, { code: 0, cancelled: false, lastLine: '2 a b; rm -rf x' });
    });
});

describe('running the CLI', () => {
    it('reports the last line of stderr and the exit status', async () => {
        const lines: string[] = [];
        const outcome = await runCli([process.execPath, '-e', 'console.log("working"); console.error("umbra: error: no"); process.exit(2)'], {
            cwd: process.cwd(),
            env: process.env,
            onLine: (l) => lines.push(l),
        });
        assert.deepStrictEqual(outcome, { code: 2, cancelled: false, lastLine: 'umbra: error: no' });
        assert.deepStrictEqual(lines.sort(), ['umbra: error: no', 'working']);
    });

    it('stops it when the user cancels', async () => {
        const source = new CancellationTokenSource();
        const start = Date.now();
        const pending = runCli([process.execPath, '-e', 'setTimeout(() => {}, 60000)'], { cwd: process.cwd(), env: process.env, token: source.token });
        setTimeout(() => source.cancel(), 100);
        const outcome = await pending;
        assert.equal(outcome.cancelled, true);
        assert.equal(outcome.code, null);
        assert.ok(Date.now() - start < 10_000);
    });

    it('says so when the program cannot be run', async () => {
        const outcome = await runCli(['/nonexistent/umbra', 'audit'], { cwd: process.cwd(), env: process.env });
        assert.equal(outcome.code, null);
        assert.match(outcome.lastLine, /\/nonexistent\/umbra could not be run: .*ENOENT/);
    });
});
