// The languages Umbra can complete; package.json's activationEvents list the same ids and its
// `umbra.languages` setting offers them (a test checks both).

export const LANGUAGES = ['python', 'go', 'java', 'javascript', 'typescript'] as const;

export type Language = (typeof LANGUAGES)[number];

/** The default of `umbra.languages`: those the embedded default model was trained on. A model
 * that knows more (e.g. Qwen2.5-Coder) is worth adding `javascript` and `typescript` for. */
export const DEFAULT_LANGUAGES: readonly Language[] = ['python', 'go', 'java'];

export function isLanguage(value: unknown): value is Language {
    return typeof value === 'string' && (LANGUAGES as readonly string[]).includes(value);
}

/** A vscode DocumentSelector (plain data, so it needs no `vscode` import): files on disk and
 * unsaved editors of each language. */
export function documentSelector(languages: readonly string[]): { scheme: string; language: string }[] {
    return languages.flatMap((language) => [
        { scheme: 'file', language },
        { scheme: 'untitled', language },
    ]);
}
