// The languages Umbra completes; package.json's activationEvents list the same ids (a test
// checks it).

export const LANGUAGES = ['python', 'go', 'java', 'javascript', 'typescript'] as const;

/** A vscode DocumentSelector (plain data, so it needs no `vscode` import): files on disk and
 * unsaved editors of each language. */
export const DOCUMENT_SELECTOR = LANGUAGES.flatMap((language) => [
    { scheme: 'file', language },
    { scheme: 'untitled', language },
]);
