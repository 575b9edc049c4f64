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
    /** SecureGate: whether the last completion ran secure or with a revealing adapter that the
     * user's access key unlocked (a name only, never a key). Absent when the server did not say
     * (an older server) or said something outside the contract: then nothing about access is
     * shown, rather than a lock the server never vouched for. */
    access?: Access;
    /** The privacy mode in force for what goes to the cloud, as the server words it in one line:
     * "none · cloud reads ~99.9 % of tokens", "NOIR ε=1024 · STuned 300 steps, gradient σ=0.1 ·
     * strongest attack 8.0 % (baseline 9.2 %)", "NOIR ε=500 · not measured" (umbra/privacy/mode.py).
     * Absent before the model is loaded or from an older server: then none is shown. */
    privacy?: string;
    /** What the attack tables measured for that mode (`privacyDetails`), for the tooltip. */
    privacyDetails?: PrivacyDetails;
}

/** `privacyDetails` of `umbra/status` (percentages; null: not measured). */
export interface PrivacyDetails {
    label: string;
    defended: boolean;
    /** Defended and measured above the client-blocks-alone control: sent to a remote cloud without the opt-in. */
    offered: boolean;
    optedIn: boolean;
    measured: boolean;
    attacks: { name: string; percent: number }[];
    baseline: number | null;
    top1: number | null;
    clientAloneTop1: number | null;
    fcleanTop1: number | null;
    seeds: number | null;
    adaptive: boolean;
    source: string;
}

/** The `access` field of `umbra/status`: "secure" or "revealing: NAME". */
export type Access = { kind: 'secure' } | { kind: 'revealing'; adapter: string };

const REVEALING_PREFIX = 'revealing: ';
/** Longest adapter name shown in the status bar itself (the tooltip has it whole). */
export const MAX_SHOWN_NAME = 32;
/** Longest privacy summary shown in the status bar itself (the tooltip has it whole). */
export const MAX_SHOWN_PRIVACY = 100;

/** States the extension itself knows about, besides the server's. */
export type ClientState = 'disabled' | 'stopped' | 'misconfigured';

export type Severity = 'ok' | 'busy' | 'warning' | 'error' | 'off';

export interface StatusView {
    text: string;
    tooltip: string;
    severity: Severity;
    /** What a screen reader says instead of `text` (codicons such as the lock are not read). */
    ariaLabel?: string;
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
    const { state, message, mode, expert, access, privacy, privacyDetails } = raw as Record<string, unknown>;
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
    if (typeof privacy === 'string' && privacy.trim() !== '' && !/[\u0000-\u001f\u007f]/.test(privacy)) {
        parsed.privacy = privacy.trim();
        const details = parsePrivacyDetails(privacyDetails);
        if (details !== undefined) {
            parsed.privacyDetails = details;
        }
    }
    const parsedAccess = parseAccess(access);
    if (parsedAccess !== undefined) {
        parsed.access = parsedAccess;
    }
    return parsed;
}

const CLEAN = (x: unknown): x is string => typeof x === 'string' && !/[\u0000-\u001f\u007f]/.test(x);
const PERCENT = (x: unknown): number | null => (typeof x === 'number' && Number.isFinite(x) ? x : null);

/** Parses `privacyDetails`; undefined when it does not follow the contract (then the tooltip
 * shows the summary alone). */
export function parsePrivacyDetails(raw: unknown): PrivacyDetails | undefined {
    if (typeof raw !== 'object' || raw === null) {
        return undefined;
    }
    const d = raw as Record<string, unknown>;
    if (!CLEAN(d.label) || typeof d.defended !== 'boolean' || typeof d.measured !== 'boolean') {
        return undefined;
    }
    const attacks = Array.isArray(d.attacks)
        ? d.attacks.flatMap((a) => {
              const { name, percent } = (a ?? {}) as Record<string, unknown>;
              return CLEAN(name) && PERCENT(percent) !== null ? [{ name, percent: percent as number }] : [];
          })
        : [];
    return {
        label: d.label,
        defended: d.defended,
        offered: d.offered === true,
        optedIn: d.optedIn === true,
        measured: d.measured,
        attacks,
        baseline: PERCENT(d.baseline),
        top1: PERCENT(d.top1),
        clientAloneTop1: PERCENT(d.clientAloneTop1),
        fcleanTop1: PERCENT(d.fcleanTop1),
        seeds: PERCENT(d.seeds),
        adaptive: d.adaptive === true,
        source: CLEAN(d.source) ? d.source : '',
    };
}

/** Parses the `access` field; undefined for anything but "secure" or "revealing: NAME". */
export function parseAccess(raw: unknown): Access | undefined {
    if (raw === 'secure') {
        return { kind: 'secure' };
    }
    if (typeof raw === 'string' && raw.startsWith(REVEALING_PREFIX)) {
        const adapter = raw.slice(REVEALING_PREFIX.length).trim();
        if (adapter !== '' && !/[\u0000-\u001f\u007f]/.test(adapter)) {
            return { kind: 'revealing', adapter };
        }
    }
    return undefined;
}

/** The `access` field as the server wrote it: "secure" or "revealing: NAME". */
export function accessLabel(access: Access): string {
    return access.kind === 'secure' ? 'secure' : `${REVEALING_PREFIX}${access.adapter}`;
}

/** A name as literal status-bar text: `$(...)` would otherwise render as an icon. */
export function escapeIcons(text: string): string {
    return text.replace(/\$\(/g, '\\$(');
}

function shorten(name: string, max = MAX_SHOWN_NAME): string {
    return name.length <= max ? name : `${name.slice(0, max - 1)}…`;
}

/** The status-bar suffix for the access state: a lock when secure, an open lock and the
 * adapter's name when revealing. Empty when the server did not report access. */
export function accessText(access: Access | undefined): string {
    if (access === undefined) {
        return '';
    }
    return access.kind === 'secure' ? ' $(lock)' : ` $(unlock) ${escapeIcons(shorten(access.adapter))}`;
}

/** The tooltip line for the access state. */
export function accessTooltip(access: Access | undefined): string {
    if (access === undefined) {
        return '';
    }
    return access.kind === 'secure'
        ? 'Access: secure (no revealing adapter served the last completion)'
        : `Access: ${accessLabel(access)} (your access key unlocked this revealing adapter for the last completion)`;
}

/** The status-bar part for the privacy in force: a shield and the server's summary. */
export function privacyText(privacy: string | undefined): string {
    return privacy === undefined ? '' : ` $(shield) ${escapeIcons(shorten(privacy, MAX_SHOWN_PRIVACY))}`;
}

const pct = (x: number | null): string => (x === null ? 'not measured' : `${x.toFixed(1)} %`);

/** The tooltip lines for the privacy in force: the summary, what it means, and the measured figures. */
export function privacyTooltip(privacy: string | undefined, details?: PrivacyDetails): string {
    if (privacy === undefined) {
        return '';
    }
    const lines = [`Privacy: ${privacy}`];
    if (privacy === 'none' || privacy.startsWith('none ')) {
        lines[0] += ' (no client bundle: the cloud receives the hidden states of the public model as they are; make a bundle with `umbra init`)';
    } else if (privacy.startsWith('client only')) {
        lines[0] += ' (umbra.clientOnly: the client\'s blocks alone, the middle skipped; no cloud connection, nothing leaves this machine)';
        return lines.join('\n');
    } else if (privacy.startsWith('NOIR')) {
        lines[0] += ' (client bundle: INDVocab-randomized embeddings and private token ids; the cloud receives randomized hidden states)';
    }
    if (details === undefined) {
        return lines.join('\n');
    }
    if (details.optedIn) {
        lines.push(details.defended
            ? 'Sent to a cloud not on this machine, although it completes below the client\'s blocks alone, because umbra.allowUndefendedRemoteCloud (or the server\'s flag or environment) allows it.'
            : 'Sent undefended to a cloud not on this machine because umbra.allowUndefendedRemoteCloud (or the server\'s flag or environment) allows it.');
    } else if (details.defended && !details.offered) {
        lines.push('Not sent to a cloud on another machine without umbra.allowUndefendedRemoteCloud: it does not complete above the client\'s blocks alone (umbra.clientOnly needs no cloud).');
    }
    if (!details.measured) {
        lines.push('Measured: nothing — no attack table covers this configuration, so it counts as undefended.');
        return lines.join('\n');
    }
    const attacks = details.attacks.map((a) => `${a.name} ${pct(a.percent)}`).join(', ');
    lines.push(`Attacks (tokens recovered): ${attacks}; frequency-only baseline ${pct(details.baseline)}` +
        ` — ${details.defended ? 'every attack within 1 point of it' : 'not defended'}.`);
    lines.push(`Next-token top-1: ${pct(details.top1)} (fClean ${pct(details.fcleanTop1)}, client blocks alone ${pct(details.clientAloneTop1)}).`);
    lines.push(`${details.seeds ?? '?'} seed(s); adaptive attacker: ${details.adaptive ? 'included' : 'not measured'}` +
        `${details.source ? `; source: ${details.source}` : ''}.`);
    return lines.join('\n');
}

export function viewOf(status: StatusParams): StatusView {
    const detail = status.message ? `\n${status.message}` : '';
    const mode = status.mode ? ` (${status.mode} mode)` : '';
    const privacy = status.privacy !== undefined ? `\n${privacyTooltip(status.privacy, status.privacyDetails)}` : '';
    switch (status.state) {
        case 'starting':
            return { text: '$(sync~spin) Umbra', tooltip: `Umbra: starting${mode}${privacy}${detail}`, severity: 'busy' };
        case 'ready': {
            const access = accessTooltip(status.access);
            return {
                text:
                    `$(check) Umbra${status.expert ? `: ${escapeIcons(status.expert)}` : ''}` +
                    `${privacyText(status.privacy)}${accessText(status.access)}`,
                tooltip:
                    `Umbra: ready${mode}${status.expert ? `, ${status.expert} expert` : ''}${privacy}` +
                    `${access ? `\n${access}` : ''}${detail}`,
                severity: 'ok',
                ariaLabel: [
                    'Umbra: ready',
                    ...(status.expert ? [`${status.expert} expert`] : []),
                    ...(status.privacy ? [`privacy ${status.privacy}`] : []),
                    ...(status.access ? [`access ${accessLabel(status.access)}`] : []),
                ].join(', '),
            };
        }
        case 'unreachable':
            return {
                text: '$(warning) Umbra: cloud unreachable',
                tooltip:
                    `Umbra: the cloud is unreachable${mode}${privacy}${detail}\n` +
                    'No completions until it is back; nothing is sent anywhere else.',
                severity: 'warning',
            };
        case 'error':
            return { text: '$(error) Umbra', tooltip: `Umbra: error${mode}${privacy}${detail}`, severity: 'error' };
    }
}

export function clientView(state: ClientState, message = ''): StatusView {
    const detail = message ? `\n${message}` : '';
    switch (state) {
        case 'disabled':
            return {
                text: '$(circle-slash) Umbra',
                tooltip: 'Umbra: off (umbra.enable): nothing is sent to the language server. Click for the menu to turn it on.',
                severity: 'off',
            };
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
