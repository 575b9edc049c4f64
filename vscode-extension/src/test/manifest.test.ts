// package.json must agree with the code: setting defaults, activation languages, commands.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { COMMAND_ACCESS_STATUS, COMMAND_ROTATE_ACCESS_KEY } from '../accessCli';
import { COMMAND_SECURITY_REPORT } from '../securityReport';
import { DEFAULT_LANGUAGES, LANGUAGES } from '../languages';
import { ConfigSource, SETTING_KEYS, defaultOf, readSettings } from '../settings';

const root = join(__dirname, '..', '..');
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const properties: Record<string, { default: unknown; scope?: string; markdownDescription?: string }> =
    manifest.contributes.configuration.properties;

describe('package.json', () => {
    it('contributes exactly the settings the code reads, with the same defaults', () => {
        assert.deepStrictEqual(Object.keys(properties).sort(), SETTING_KEYS.map((k) => `umbra.${k}`).sort());
        for (const key of SETTING_KEYS) {
            assert.deepStrictEqual(properties[`umbra.${key}`].default, defaultOf(key), key);
            assert.ok((properties[`umbra.${key}`].markdownDescription ?? '').length > 10, `${key} needs a description`);
        }
    });

    it('package.json defaults are valid settings', () => {
        // What VS Code hands over when the user set nothing: package.json's defaults.
        const source: ConfigSource = {
            get: <T>(key: string) => properties[`umbra.${key}`].default as T,
        };
        assert.doesNotThrow(() => readSettings(source));
    });

    it('keeps the program, model and cloud out of workspace settings', () => {
        for (const key of SETTING_KEYS) {
            if (/^(server|model|cloud)\./.test(key)) {
                assert.equal(properties[`umbra.${key}`].scope, 'machine', key);
            }
        }
    });

    it('activates on every completed language', () => {
        assert.deepStrictEqual(
            [...manifest.activationEvents].sort(),
            LANGUAGES.map((l) => `onLanguage:${l}`).sort(),
        );
    });

    it('offers exactly the activation languages in umbra.languages, defaulting to the default model\'s', () => {
        const setting = manifest.contributes.configuration.properties['umbra.languages'];
        assert.deepStrictEqual(setting.items.enum, [...LANGUAGES]);
        assert.deepStrictEqual(setting.default, [...DEFAULT_LANGUAGES]);
        assert.equal(setting.uniqueItems, true);
    });

    it('declares the commands and the entry point', () => {
        const commands = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
        // commands.ts and extension.ts import vscode; their ids are checked against the sources
        const sources = ['commands.ts', 'extension.ts'].map((f) => readFileSync(join(root, 'src', f), 'utf8')).join('\n');
        const registered = [...sources.matchAll(/COMMAND_\w+ = '(umbra\.\w+)'/g)].map((m) => m[1]);
        assert.deepStrictEqual(
            commands,
            [...registered, COMMAND_ACCESS_STATUS, COMMAND_ROTATE_ACCESS_KEY, COMMAND_SECURITY_REPORT].sort(),
        );
        assert.deepStrictEqual(
            registered.sort(),
            ['umbra.restartServer', 'umbra.showMenu', 'umbra.showOutput', 'umbra.toggle', 'umbra.triggerCompletion'],
        );
        const [binding] = manifest.contributes.keybindings;
        assert.equal(binding.command, 'umbra.triggerCompletion');
        for (const c of manifest.contributes.commands) {
            assert.equal(c.category, 'Umbra', c.command);
        }
        assert.equal(manifest.main, './dist/extension.js'); // the esbuild bundle of src/extension.ts
        assert.match(manifest.scripts['vscode:prepublish'], /npm run bundle/);
        assert.match(manifest.scripts.bundle, /--bundle .*--external:vscode/);
        assert.equal(manifest.name, 'umbra');
        assert.match(manifest.engines.vscode, /^\^1\.(9\d|\d{3})/);
    });
});
