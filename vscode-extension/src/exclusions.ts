// Files Umbra never sees: `umbra.exclude` globs (by default `.env` files, private keys and
// certificates). An excluded document is never synced to the language server (the client's
// document-sync middleware drops its didOpen/didChange/willSave/didSave/didClose) and never
// completed (the inline provider asks nothing for it).
//
// Pure: no `vscode` import. Documents are described by their URI's scheme and fsPath, which is
// all a vscode.Uri and the tests' plain objects have in common.

import { minimatch } from 'minimatch';

/** The default of `umbra.exclude` (package.json repeats it; a test checks both agree). */
export const DEFAULT_EXCLUDE: readonly string[] = Object.freeze([
    // environment files
    '**/.env',
    '**/.env.*',
    '**/*.env',
    // private keys and key stores
    '**/*.key',
    '**/*.pem',
    '**/*.p8',
    '**/*.p12',
    '**/*.pfx',
    '**/*.jks',
    '**/*.keystore',
    '**/id_rsa*',
    '**/id_dsa*',
    '**/id_ecdsa*',
    '**/id_ed25519*',
    '**/.ssh/**',
    // certificates
    '**/*.crt',
    '**/*.cer',
    '**/*.der',
]);

/** What an exclusion is decided on: a vscode.Uri has both fields. */
export interface UriLike {
    readonly scheme: string;
    readonly fsPath: string;
}

/** Matches documents against globs. A glob without `/` matches the file name anywhere
 * (`*.pem`, `id_rsa`); one with `/` matches the absolute path (`**` crosses folders, `/home/me/
 * secrets/**`) or the path inside a workspace folder (`secrets/**`). Dot files and folders
 * match like any other; case is ignored where file systems ignore it (Windows, macOS). Only
 * files on disk (`file:` URIs) can be excluded: an unsaved editor has no path. */
export class Exclusions {
    private readonly options: { dot: boolean; nocase: boolean; matchBase: boolean };
    readonly folders: readonly string[];

    constructor(
        readonly globs: readonly string[],
        workspaceFolders: readonly string[] = [],
        platform: string = process.platform,
    ) {
        this.options = { dot: true, nocase: platform === 'win32' || platform === 'darwin', matchBase: true };
        this.folders = workspaceFolders.map((f) => withoutTrailingSlash(slashes(f)));
    }

    /** The first glob that excludes `uri`, or undefined. */
    matching(uri: UriLike): string | undefined {
        if (uri.scheme !== 'file' || this.globs.length === 0) {
            return undefined;
        }
        const path = slashes(uri.fsPath);
        const candidates = [path, ...this.folders.filter((f) => isInside(path, f)).map((f) => path.slice(f.length + 1))];
        return this.globs.find((glob) => candidates.some((p) => minimatch(p, slashes(glob), this.options)));
    }

    isExcluded(uri: UriLike): boolean {
        return this.matching(uri) !== undefined;
    }
}

/** A document event of vscode-languageclient's sync middleware, reduced to what is decided on. */
interface HasUri {
    readonly uri: UriLike;
}
interface HasDocument {
    readonly document: HasUri;
}

/** vscode-languageclient `Middleware` members for document sync that drop every notification
 * (and answer the willSaveWaitUntil request with no edits) for excluded documents, so the
 * server never receives their text, their changes or even their URI. The same objects the
 * client passes flow through unchanged otherwise. */
export function syncMiddleware(exclusions: Exclusions) {
    const skip = (uri: UriLike) => exclusions.isExcluded(uri);
    return {
        didOpen: <D extends HasUri>(document: D, next: (d: D) => Promise<void>) =>
            skip(document.uri) ? Promise.resolve() : next(document),
        didChange: <E extends HasDocument>(event: E, next: (e: E) => Promise<void>) =>
            skip(event.document.uri) ? Promise.resolve() : next(event),
        willSave: <E extends HasDocument>(event: E, next: (e: E) => Promise<void>) =>
            skip(event.document.uri) ? Promise.resolve() : next(event),
        willSaveWaitUntil: <E extends HasDocument, T>(event: E, next: (e: E) => PromiseLike<T[]>) =>
            skip(event.document.uri) ? Promise.resolve([] as T[]) : next(event),
        didSave: <D extends HasUri>(document: D, next: (d: D) => Promise<void>) =>
            skip(document.uri) ? Promise.resolve() : next(document),
        didClose: <D extends HasUri>(document: D, next: (d: D) => Promise<void>) =>
            skip(document.uri) ? Promise.resolve() : next(document),
    };
}

function slashes(path: string): string {
    return path.replace(/\\/g, '/');
}

function withoutTrailingSlash(path: string): string {
    return path.length > 1 ? path.replace(/\/+$/, '') : path;
}

function isInside(path: string, folder: string): boolean {
    return path.startsWith(`${folder}/`);
}
