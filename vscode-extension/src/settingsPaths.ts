// Path settings' variables: `${workspaceFolder}`, `${userHome}` and a leading `~`. Pure.

/** Values substituted into path settings: `${workspaceFolder}`, `${userHome}` and a leading `~`. */
export interface PathContext {
    workspaceFolder?: string;
    userHome?: string;
}

/** Substitutes `${workspaceFolder}`, `${userHome}` and a leading `~`; returns null when a
 * variable is used but unknown. */
export function expandPath(value: string, paths: PathContext): string | null {
    let unknown = false;
    let out = value.replace(/\$\{(workspaceFolder|userHome)\}/g, (_m, name: keyof PathContext) => {
        const replacement = paths[name];
        if (replacement === undefined) {
            unknown = true;
            return '';
        }
        return replacement;
    });
    if (unknown) {
        return null;
    }
    if (out === '~' || out.startsWith('~/')) {
        if (paths.userHome === undefined) {
            return null;
        }
        out = paths.userHome + out.slice(1);
    }
    return out;
}
