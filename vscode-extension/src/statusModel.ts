// What the status bar shows and when the user gets a message, as a pure state machine fed by
// `umbra/status` notifications and by the client's own lifecycle. No `vscode` import.
//
// Invariant 2 of the design: when the cloud is unreachable the extension says so — a warning
// in the status bar for as long as it lasts and one warning message per outage. It never
// falls back to anything; the server simply returns no completions meanwhile.

export const SERVER_STATES = ['starting', 'ready', 'unreachable', 'error'] as const;
export type ServerState = (typeof SERVER_STATES)[number];

/** Params of the `umbra/status` notification. */
export interface StatusParams {
    state: ServerState;
    message: string;
    mode: string;
    /** The per-language expert adapter that served the last completion (a name only). */
    expert?: string;
}

/** States the extension itself knows about, besides the server's. */
export type ClientState = 'disabled' | 'stopped' | 'misconfigured';

export type Severity = 'ok' | 'busy' | 'warning' | 'error' | 'off';

export interface StatusView {
    text: string;
    tooltip: string;
    severity: Severity;
}

export interface StatusUpdate {
    view: StatusView;
    /** Show this as a warning message (at most once per outage). */
    warning?: string;
    /** Show this as an error message (at most once until the server is ready again). */
    error?: string;
}

/** Validates notification params; undefined when they do not follow the contract. */
export function parseStatus(raw: unknown): StatusParams | undefined {
    if (typeof raw !== 'object' || raw === null) {
        return undefined;
    }
    const { state, message, mode, expert } = raw as Record<string, unknown>;
    if (typeof state !== 'string' || !(SERVER_STATES as readonly string[]).includes(state)) {
        return undefined;
    }
    const parsed: StatusParams = {
        state: state as ServerState,
        message: typeof message === 'string' ? message : '',
        mode: typeof mode === 'string' ? mode : '',
    };
    if (typeof expert === 'string' && expert) {
        parsed.expert = expert;
    }
    return parsed;
}

export function viewOf(status: StatusParams): StatusView {
    const detail = status.message ? `\n${status.message}` : '';
    const mode = status.mode ? ` (${status.mode} mode)` : '';
    switch (status.state) {
        case 'starting':
            return { text: '$(sync~spin) Umbra', tooltip: `Umbra: starting${mode}${detail}`, severity: 'busy' };
        case 'ready':
            return {
                text: status.expert ? `$(check) Umbra: ${status.expert}` : '$(check) Umbra',
                tooltip: `Umbra: ready${mode}${status.expert ? `, ${status.expert} expert` : ''}${detail}`,
                severity: 'ok',
            };
        case 'unreachable':
            return {
                text: '$(warning) Umbra: cloud unreachable',
                tooltip:
                    `Umbra: the cloud is unreachable${mode}${detail}\n` +
                    'No completions until it is back; nothing is sent anywhere else.',
                severity: 'warning',
            };
        case 'error':
            return { text: '$(error) Umbra', tooltip: `Umbra: error${mode}${detail}`, severity: 'error' };
    }
}

export function clientView(state: ClientState, message = ''): StatusView {
    const detail = message ? `\n${message}` : '';
    switch (state) {
        case 'disabled':
            return { text: '$(circle-slash) Umbra', tooltip: 'Umbra: disabled (umbra.enable)', severity: 'off' };
        case 'stopped':
            return { text: '$(error) Umbra: stopped', tooltip: `Umbra: the language server stopped${detail}`, severity: 'error' };
        case 'misconfigured':
            return { text: '$(error) Umbra: settings', tooltip: `Umbra: invalid settings${detail}`, severity: 'error' };
    }
}

/** Tracks outages across notifications: the first `unreachable` after anything else starts an
 * outage and yields a warning; later `unreachable`/`starting`/`error` notifications (including
 * a server restart) do not repeat it; only `ready` ends the outage. Errors work the same way. */
export class StatusTracker {
    private inOutage = false;
    private errorShown = false;

    onStatus(status: StatusParams): StatusUpdate {
        const update: StatusUpdate = { view: viewOf(status) };
        switch (status.state) {
            case 'ready':
                this.inOutage = false;
                this.errorShown = false;
                break;
            case 'unreachable':
                if (!this.inOutage) {
                    this.inOutage = true;
                    update.warning = `Umbra: the cloud is unreachable — no completions until it is back.${
                        status.message ? ` ${status.message}` : ''
                    }`;
                }
                break;
            case 'error':
                if (!this.errorShown) {
                    this.errorShown = true;
                    update.error = `Umbra: ${status.message || 'the language server reported an error'}`;
                }
                break;
            case 'starting':
                break;
        }
        return update;
    }

    /** A restart asked for by the user may show a repeated error; an outage stays one outage. */
    onRestart(): void {
        this.errorShown = false;
    }

    get outage(): boolean {
        return this.inOutage;
    }
}
