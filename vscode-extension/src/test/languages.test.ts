// languages.ts: the document selector and the language ids.
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { DEFAULT_LANGUAGES, LANGUAGES, documentSelector, isLanguage } from '../languages';

describe('languages', () => {
    it('selects files on disk and unsaved editors of exactly the given languages', () => {
        assert.deepStrictEqual(documentSelector(['go', 'java']), [
            { scheme: 'file', language: 'go' },
            { scheme: 'untitled', language: 'go' },
            { scheme: 'file', language: 'java' },
            { scheme: 'untitled', language: 'java' },
        ]);
        assert.deepStrictEqual(documentSelector([]), []);
    });

    it('defaults to completable languages only', () => {
        assert.ok(DEFAULT_LANGUAGES.every(isLanguage));
        assert.ok(LANGUAGES.every(isLanguage));
        assert.equal(isLanguage('cobol'), false);
        assert.equal(isLanguage(3), false);
    });
});
