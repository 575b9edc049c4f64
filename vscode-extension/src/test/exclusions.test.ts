import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { DEFAULT_EXCLUDE, Exclusions, UriLike, syncMiddleware } from '../exclusions';

const file = (fsPath: string): UriLike => ({ scheme: 'file', fsPath });

describe('the default exclusions', () => {
    const defaults = new Exclusions(DEFAULT_EXCLUDE, ['/home/me/project'], 'linux');
    const excluded = [
        '/home/me/project/.env',
        '/home/me/project/services/api/.env',
        '/home/me/project/.env.production',
        '/home/me/project/config/prod.env',
        '/home/me/project/certs/server.pem',
        '/home/me/project/certs/server.key',
        '/home/me/project/certs/server.crt',
        '/home/me/project/certs/root.cer',
        '/home/me/project/certs/root.der',
        '/home/me/project/keys/apple.p8',
        '/home/me/project/keys/client.p12',
        '/home/me/project/keys/client.pfx',
        '/home/me/project/android/release.jks',
        '/home/me/project/android/debug.keystore',
        '/home/me/.ssh/id_rsa',
        '/home/me/.ssh/config',
        '/home/me/project/deploy/id_ed25519',
        '/home/me/project/deploy/id_ecdsa',
        '/home/me/project/deploy/id_dsa',
        '/tmp/elsewhere/.hidden/tls.pem', // outside the workspace, under a dot folder
    ];
    for (const path of excluded) {
        it(`excludes ${path}`, () => assert.ok(defaults.isExcluded(file(path)), path));
    }

    const kept = [
        '/home/me/project/main.py',
        '/home/me/project/environment.py', // not ".env"
        '/home/me/project/env/settings.py',
        '/home/me/project/keys.go', // a source file named for keys
        '/home/me/project/certificate_test.java',
        '/home/me/project/src/pem_parser.py',
        '/home/me/project/.envrc.py',
    ];
    for (const path of kept) {
        it(`keeps ${path}`, () => assert.equal(defaults.matching(file(path)), undefined, path));
    }

    it('names the pattern that excluded a file', () => {
        assert.equal(defaults.matching(file('/home/me/project/.env')), '**/.env');
        assert.equal(defaults.matching(file('/home/me/project/a/b.pem')), '**/*.pem');
    });

    it('never excludes an unsaved editor (it has no path)', () => {
        assert.equal(defaults.isExcluded({ scheme: 'untitled', fsPath: '.env' }), false);
    });
});

describe('user patterns', () => {
    it('match a file name anywhere when they have no slash', () => {
        const ex = new Exclusions(['secrets.py', '*.secret'], [], 'linux');
        assert.ok(ex.isExcluded(file('/any/where/secrets.py')));
        assert.ok(ex.isExcluded(file('/any/.where/token.secret')));
        assert.ok(!ex.isExcluded(file('/any/where/not_secrets.py')));
    });

    it('with a slash, match the absolute path or the path inside a workspace folder', () => {
        const ex = new Exclusions(['secrets/**', '/opt/vault/**'], ['/home/me/a', '/home/me/b/'], 'linux');
        assert.ok(ex.isExcluded(file('/home/me/a/secrets/db.py')));
        assert.ok(ex.isExcluded(file('/home/me/b/secrets/deep/x.go')));
        assert.ok(ex.isExcluded(file('/opt/vault/tokens.py')));
        assert.ok(!ex.isExcluded(file('/home/me/a/src/secrets.py')));
        assert.ok(!ex.isExcluded(file('/home/me/c/secrets/db.py')), 'outside every workspace folder');
    });

    it('ignore case where the file system does, and take Windows paths', () => {
        const windows = new Exclusions(DEFAULT_EXCLUDE, ['C:\\work\\app'], 'win32');
        assert.ok(windows.isExcluded(file('C:\\work\\app\\.ENV')));
        assert.ok(windows.isExcluded(file('C:\\work\\app\\certs\\Server.PEM')));
        assert.ok(new Exclusions(['secrets/**'], ['C:\\work\\app'], 'win32').isExcluded(file('C:\\work\\app\\secrets\\a.py')));
        assert.ok(new Exclusions(DEFAULT_EXCLUDE, [], 'darwin').isExcluded(file('/Users/me/.Env')));
        assert.ok(!new Exclusions(DEFAULT_EXCLUDE, [], 'linux').isExcluded(file('/home/me/.ENV')), 'case matters on Linux');
    });

    it('an empty list excludes nothing', () => {
        assert.equal(new Exclusions([], [], 'linux').isExcluded(file('/home/me/.env')), false);
    });
});

describe('the document-sync middleware', () => {
    const middleware = syncMiddleware(new Exclusions(DEFAULT_EXCLUDE, [], 'linux'));
    const secret = { uri: file('/home/me/p/.env'), text: 'TOKEN=abc' };
    const code = { uri: file('/home/me/p/main.py'), text: 'print(1)' };

    it('passes what is not excluded through, as it came', async () => {
        const sent: unknown[] = [];
        const next = async (x: unknown) => void sent.push(x);
        await middleware.didOpen(code, next);
        await middleware.didChange({ document: code }, next);
        await middleware.willSave({ document: code }, next);
        await middleware.didSave(code, next);
        await middleware.didClose(code, next);
        assert.deepStrictEqual(sent, [code, { document: code }, { document: code }, code, code]);
        assert.deepStrictEqual(await middleware.willSaveWaitUntil({ document: code }, async () => ['edit']), ['edit']);
    });

    it('drops every notification about an excluded file, and asks nothing on its save', async () => {
        const next = async () => assert.fail('an excluded document reached the client');
        await middleware.didOpen(secret, next);
        await middleware.didChange({ document: secret }, next);
        await middleware.willSave({ document: secret }, next);
        await middleware.didSave(secret, next);
        await middleware.didClose(secret, next);
        assert.deepStrictEqual(await middleware.willSaveWaitUntil({ document: secret }, next), []);
    });
});
