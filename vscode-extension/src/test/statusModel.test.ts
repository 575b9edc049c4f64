import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { StatusParams, StatusTracker, clientView, parseStatus, viewOf } from '../statusModel';

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
