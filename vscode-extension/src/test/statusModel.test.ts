import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import {
    MAX_SHOWN_NAME,
    StatusParams,
    StatusTracker,
    accessLabel,
    clientView,
    escapeIcons,
    parseAccess,
    parseStatus,
    viewOf,
} from '../statusModel';

const status = (state: StatusParams['state'], message = ''): StatusParams => ({ state, message, mode: 'split' });

describe('umbra/status params', () => {
    it('accepts the contract shape', () => {
        assert.deepStrictEqual(parseStatus({ state: 'ready', message: 'ok', mode: 'split' }), status('ready', 'ok'));
        assert.deepStrictEqual(parseStatus({ state: 'starting' }), { state: 'starting', message: '', mode: '' });
    });

    it('keeps the expert that served, a name only', () => {
        assert.deepStrictEqual(parseStatus({ state: 'ready', message: '', mode: 'split', expert: 'go' }),
            { state: 'ready', message: '', mode: 'split', expert: 'go' });
        assert.equal(parseStatus({ state: 'ready', message: '', mode: 'split', expert: null })?.expert, undefined);
        const view = viewOf({ ...status('ready'), expert: 'python' });
        assert.equal(view.text, '$(check) Umbra: python');
        assert.match(view.tooltip, /python expert/);
        assert.equal(viewOf(status('ready')).text, '$(check) Umbra');
    });

    it('keeps the access state: secure or the revealing adapter, a name only', () => {
        assert.deepStrictEqual(parseStatus({ state: 'ready', message: '', mode: 'split', expert: null, access: 'secure' }),
            { state: 'ready', message: '', mode: 'split', access: { kind: 'secure' } });
        assert.deepStrictEqual(parseStatus({ state: 'ready', message: '', mode: 'split', access: 'revealing: team-a' })?.access,
            { kind: 'revealing', adapter: 'team-a' });
        assert.deepStrictEqual(parseAccess('revealing:  team-a '), { kind: 'revealing', adapter: 'team-a' });
        assert.equal(accessLabel({ kind: 'revealing', adapter: 'team-a' }), 'revealing: team-a');
        assert.equal(accessLabel({ kind: 'secure' }), 'secure');
    });

    it('drops an access value outside the contract, never guessing secure', () => {
        for (const raw of [undefined, null, '', 'Secure', 'revealing', 'revealing: ', 'revealing:team-a', 'revealing: a\nb', 42, {}]) {
            assert.equal(parseAccess(raw), undefined, JSON.stringify(raw));
        }
        // The rest of the notification still counts.
        const parsed = parseStatus({ state: 'ready', message: '', mode: 'split', access: 'unlocked' });
        assert.deepStrictEqual(parsed, { state: 'ready', message: '', mode: 'split' });
        assert.doesNotMatch(viewOf(parsed!).text, /lock/);
        assert.doesNotMatch(viewOf(parsed!).tooltip, /Access/);
    });

    it('rejects unknown states and non-objects', () => {
        assert.equal(parseStatus({ state: 'fallback', message: '', mode: 'local' }), undefined);
        assert.equal(parseStatus(null), undefined);
        assert.equal(parseStatus('ready'), undefined);
        assert.equal(parseStatus({ message: 'x' }), undefined);
    });
});

describe('status bar view', () => {
    it('shows unreachable as a visible warning', () => {
        const view = viewOf(status('unreachable', 'connection refused'));
        assert.equal(view.severity, 'warning');
        assert.match(view.text, /\$\(warning\).*cloud unreachable/);
        assert.match(view.tooltip, /connection refused/);
        assert.match(view.tooltip, /nothing is sent anywhere else/);
    });

    it('has a distinct look per state', () => {
        const severities = (['starting', 'ready', 'unreachable', 'error'] as const).map((s) => viewOf(status(s)).severity);
        assert.deepStrictEqual(severities, ['busy', 'ok', 'warning', 'error']);
        assert.match(viewOf(status('ready')).tooltip, /split mode/);
        assert.equal(clientView('disabled').severity, 'off');
        assert.equal(clientView('stopped', 'exit 1').severity, 'error');
        assert.match(clientView('misconfigured', 'umbra.threads').tooltip, /umbra\.threads/);
    });
});

describe('access in the status bar', () => {
    const ready = (access: StatusParams['access'], expert?: string): StatusParams => ({
        ...status('ready'),
        ...(expert ? { expert } : {}),
        ...(access ? { access } : {}),
    });

    it('shows a lock when secure', () => {
        const view = viewOf(ready({ kind: 'secure' }, 'python'));
        assert.equal(view.text, '$(check) Umbra: python $(lock)');
        assert.match(view.tooltip, /^Umbra: ready \(split mode\), python expert\nAccess: secure/);
        assert.equal(view.severity, 'ok');
        assert.equal(view.ariaLabel, 'Umbra: ready, python expert, access secure');
        assert.equal(viewOf(ready({ kind: 'secure' })).text, '$(check) Umbra $(lock)');
    });

    it('shows an open lock and the adapter when revealing', () => {
        const view = viewOf(ready({ kind: 'revealing', adapter: 'team-a' }, 'go'));
        assert.equal(view.text, '$(check) Umbra: go $(unlock) team-a');
        assert.match(view.tooltip, /\nAccess: revealing: team-a \(your access key unlocked/);
        assert.equal(view.ariaLabel, 'Umbra: ready, go expert, access revealing: team-a');
        assert.equal(viewOf(ready({ kind: 'revealing', adapter: 'team-a' })).text, '$(check) Umbra $(unlock) team-a');
    });

    it('shows nothing about access when the server did not report it', () => {
        const view = viewOf(ready(undefined, 'python'));
        assert.equal(view.text, '$(check) Umbra: python');
        assert.doesNotMatch(view.tooltip, /Access/);
        assert.equal(view.ariaLabel, 'Umbra: ready, python expert');
    });

    it('keeps the tooltip\'s message last', () => {
        const view = viewOf({ ...ready({ kind: 'secure' }), message: 'all good' });
        assert.match(view.tooltip, /Access: secure.*\nall good$/s);
    });

    it('shortens long adapter names in the item (whole in the tooltip) and renders no icons from them', () => {
        const long = 'a'.repeat(MAX_SHOWN_NAME + 10);
        const view = viewOf(ready({ kind: 'revealing', adapter: long }));
        assert.ok(view.text.endsWith(`$(unlock) ${'a'.repeat(MAX_SHOWN_NAME - 1)}…`), view.text);
        assert.ok(view.tooltip.includes(long));
        assert.equal(escapeIcons('x $(zap) y'), 'x \\$(zap) y');
        assert.equal(viewOf(ready({ kind: 'revealing', adapter: '$(zap)' })).text, '$(check) Umbra $(unlock) \\$(zap)');
    });

    it('shows access only while ready', () => {
        for (const state of ['starting', 'unreachable', 'error'] as const) {
            const view = viewOf({ ...status(state), access: { kind: 'revealing', adapter: 'team-a' } });
            assert.doesNotMatch(view.text, /lock|team-a/, state);
        }
    });
});

describe('outage tracking', () => {
    it('warns once per outage, again after the cloud came back', () => {
        const tracker = new StatusTracker();
        const warnings = [
            status('starting'),
            status('ready'),
            status('unreachable', 'refused'),
            status('unreachable', 'refused'),
            status('starting'), // a server restart during the outage
            status('unreachable', 'timeout'),
            status('ready'),
            status('unreachable', 'refused'),
        ].map((s) => tracker.onStatus(s).warning);
        assert.deepStrictEqual(
            warnings.map((w) => w !== undefined),
            [false, false, true, false, false, false, false, true],
        );
        assert.match(warnings[2] ?? '', /cloud is unreachable.*refused/);
        assert.equal(tracker.outage, true);
    });

    it('warns at once when the very first status is unreachable', () => {
        const tracker = new StatusTracker();
        assert.notEqual(tracker.onStatus(status('unreachable')).warning, undefined);
    });

    it('shows an error once until ready or a user restart', () => {
        const tracker = new StatusTracker();
        assert.equal(tracker.onStatus(status('error', 'model missing')).error, 'Umbra: model missing');
        assert.equal(tracker.onStatus(status('error', 'model missing')).error, undefined);
        tracker.onRestart();
        assert.notEqual(tracker.onStatus(status('error', 'model missing')).error, undefined);
        tracker.onStatus(status('ready'));
        assert.notEqual(tracker.onStatus(status('error')).error, undefined);
    });

    it('never shows messages for starting or ready', () => {
        const tracker = new StatusTracker();
        for (const s of [status('starting'), status('ready')]) {
            const update = tracker.onStatus(s);
            assert.equal(update.warning, undefined);
            assert.equal(update.error, undefined);
        }
    });
});

describe('the privacy in force in the status bar', () => {
    const ready = (privacy?: string, access?: StatusParams['access']): StatusParams => ({
        ...status('ready'),
        ...(privacy !== undefined ? { privacy } : {}),
        ...(access ? { access } : {}),
        expert: 'python',
    });

    it('keeps what the server sends, a short string', () => {
        assert.equal(parseStatus({ state: 'ready', mode: 'split', privacy: 'NOIR ε=4' })?.privacy, 'NOIR ε=4');
        assert.equal(parseStatus({ state: 'ready', mode: 'split', privacy: 'none' })?.privacy, 'none');
        for (const raw of [null, undefined, '', '  ', 4, 'NOIR\nε=4']) {
            assert.equal(parseStatus({ state: 'ready', mode: 'split', privacy: raw })?.privacy, undefined, JSON.stringify(raw));
        }
    });

    it('shows state, privacy and access together', () => {
        const noir = viewOf(ready('NOIR ε=4', { kind: 'secure' }));
        assert.equal(noir.text, '$(check) Umbra: python $(shield) NOIR ε=4 $(lock)');
        assert.match(noir.tooltip, /\nPrivacy: NOIR ε=4 \(client bundle: INDVocab-randomized embeddings/);
        assert.equal(noir.ariaLabel, 'Umbra: ready, python expert, privacy NOIR ε=4, access secure');
        const revealing = viewOf(ready('NOIR ε=∞', { kind: 'revealing', adapter: 'team-a' }));
        assert.equal(revealing.text, '$(check) Umbra: python $(shield) NOIR ε=∞ $(unlock) team-a');
    });

    it('says plainly when there is none', () => {
        const none = viewOf(ready('none', { kind: 'secure' }));
        assert.equal(none.text, '$(check) Umbra: python $(shield) none $(lock)');
        assert.match(none.tooltip, /Privacy: none \(no client bundle: the cloud receives the hidden states of the public model as they are/);
    });

    it('shows no privacy it was not told (before the model is loaded, an older server)', () => {
        const view = viewOf(ready(undefined, { kind: 'secure' }));
        assert.equal(view.text, '$(check) Umbra: python $(lock)');
        assert.doesNotMatch(view.tooltip, /Privacy/);
    });

    it('keeps it in the tooltip of the other states', () => {
        assert.match(viewOf({ ...status('unreachable'), privacy: 'NOIR ε=4' }).tooltip, /Privacy: NOIR ε=4/);
        assert.match(viewOf({ ...status('starting'), privacy: 'none' }).tooltip, /Privacy: none/);
    });

    it('shows the summary in the item and the measured figures in the tooltip', () => {
        const summary = 'NOIR ε=1024 · STuned 300 steps, gradient σ=0.1 · strongest attack 8.0 % (baseline 9.2 %)';
        const parsed = parseStatus({
            state: 'ready', mode: 'split', privacy: summary,
            privacyDetails: {
                key: 'k', label: 'NOIR ε=1024 · STuned 300 steps, gradient σ=0.1', defended: true, optedIn: false,
                measured: true, attacks: [{ name: '(a) nearest neighbour', percent: 0.1 }, { name: '(b) probe', percent: 8.0 },
                    { name: 'bad\nname', percent: 1 }],
                baseline: 9.2, top1: 20.0, clientAloneTop1: null, fcleanTop1: 56.8, seeds: 1, adaptive: false,
                source: 'docs/privacy/attacks.md',
            },
        });
        assert.ok(parsed?.privacyDetails);
        assert.equal(parsed.privacyDetails.attacks.length, 2); // a name with a control character is dropped
        const view = viewOf(parsed);
        assert.equal(view.text, `$(check) Umbra $(shield) ${summary}`);
        assert.match(view.tooltip, /Attacks \(tokens recovered\): \(a\) nearest neighbour 0\.1 %, \(b\) probe 8\.0 %; frequency-only baseline 9\.2 % — every attack within 1 point of it/);
        assert.match(view.tooltip, /Next-token top-1: 20\.0 % \(fClean 56\.8 %, client blocks alone not measured\)/);
        assert.match(view.tooltip, /1 seed\(s\); adaptive attacker: not measured; source: docs\/privacy\/attacks\.md/);
        assert.match(view.tooltip, /Not sent to a cloud on another machine without umbra\.allowUndefendedRemoteCloud/);
        const offered = parseStatus({ ...parsed, privacyDetails: { ...parsed.privacyDetails, offered: true } });
        assert.doesNotMatch(viewOf(offered!).tooltip, /Not sent to a cloud on another machine/);
    });

    it('says when a setting sends a defended mode that completes below the client\'s blocks alone', () => {
        const sent = parseStatus({
            state: 'ready', mode: 'split',
            privacy: 'NOIR ε=1024 — sent by your setting · attacks held; completes below the client-blocks-alone control (23.1 % vs 27.1 %)',
            privacyDetails: { label: 'NOIR ε=1024', defended: true, offered: false, optedIn: true, measured: true,
                attacks: [{ name: '(a) nearest neighbour', percent: 0.1 }], baseline: 9.2, top1: 23.1,
                clientAloneTop1: 27.1, fcleanTop1: 53.5, seeds: 3, adaptive: true, source: 'docs/privacy/share_sweep.md' },
        });
        const tooltip = viewOf(sent!).tooltip;
        assert.match(tooltip, /Sent to a cloud not on this machine, although it completes below the client's blocks alone/);
        assert.doesNotMatch(tooltip, /Sent undefended/);
    });

    it('says when a setting sends states undefended, and when nothing was measured', () => {
        const sent = parseStatus({
            state: 'ready', mode: 'split', privacy: 'none — sent undefended by your setting · cloud reads ~99.9 % of tokens',
            privacyDetails: { label: 'none', defended: false, optedIn: true, measured: true,
                attacks: [{ name: '(a) nearest neighbour', percent: 99.9 }], baseline: 9.2, top1: 57.9,
                clientAloneTop1: null, fcleanTop1: 56.8, seeds: 1, adaptive: false, source: 'docs/privacy/attacks.md' },
        });
        const tooltip = viewOf(sent!).tooltip;
        assert.match(tooltip, /Privacy: none — sent undefended by your setting · cloud reads ~99\.9 % of tokens \(no client bundle/);
        assert.match(tooltip, /Sent undefended to a cloud not on this machine because umbra\.allowUndefendedRemoteCloud/);
        assert.match(tooltip, /— not defended\./);
        const unmeasured = parseStatus({
            state: 'ready', mode: 'split', privacy: 'NOIR ε=500 · not measured',
            privacyDetails: { label: 'NOIR ε=500', defended: false, optedIn: false, measured: false },
        });
        assert.match(viewOf(unmeasured!).tooltip, /Measured: nothing — no attack table covers this configuration/);
        assert.equal(parseStatus({ state: 'ready', mode: 'split', privacy: 'x', privacyDetails: { label: 3 } })?.privacyDetails, undefined);
    });

    it('says client-only plainly: the mode, nothing sent, no attack figures', () => {
        const alone = parseStatus({
            state: 'ready', mode: 'client-only', privacy: 'client only · nothing is sent (the client\'s blocks alone)',
            privacyDetails: { key: 'client-only', label: 'client only · nothing is sent (the client\'s blocks alone)',
                defended: true, optedIn: false, measured: false },
        });
        const view = viewOf(alone!);
        assert.equal(view.text, '$(check) Umbra $(shield) client only · nothing is sent (the client\'s blocks alone)');
        assert.match(view.tooltip, /Umbra: ready \(client-only mode\)/);
        assert.match(view.tooltip, /umbra\.clientOnly: the client's blocks alone, the middle skipped; no cloud connection/);
        assert.doesNotMatch(view.tooltip, /Measured: nothing/);
    });

    it('renders no icon from the server\'s words', () => {
        assert.equal(viewOf({ ...status('ready'), privacy: '$(zap) x' }).text, '$(check) Umbra $(shield) \\$(zap) x');
    });
});
