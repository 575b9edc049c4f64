// The status bar item and the messages driven by `umbra/status` (state machine in statusModel.ts).

import * as vscode from 'vscode';
import { ClientState, StatusTracker, StatusView, StatusUpdate, accessLabel, clientView, parseStatus } from './statusModel';

const BACKGROUNDS: Partial<Record<StatusView['severity'], string>> = {
    warning: 'statusBarItem.warningBackground',
    error: 'statusBarItem.errorBackground',
};

export class StatusBar implements vscode.Disposable {
    private readonly item: vscode.StatusBarItem;
    private readonly tracker = new StatusTracker();

    constructor(
        private readonly log: vscode.LogOutputChannel,
        clickCommand: string,
    ) {
        this.item = vscode.window.createStatusBarItem('umbra.status', vscode.StatusBarAlignment.Right, 100);
        this.item.name = 'Umbra';
        this.item.command = clickCommand;
    }

    /** Handles one `umbra/status` notification. */
    onNotification(raw: unknown): void {
        const status = parseStatus(raw);
        if (status === undefined) {
            this.log.warn('ignored an umbra/status notification that does not follow the contract');
            return;
        }
        const access = status.access ? ` [access: ${accessLabel(status.access)}]` : '';
        this.log.info(`status: ${status.state}${access}${status.message ? ` — ${status.message}` : ''}`);
        this.apply(this.tracker.onStatus(status));
    }

    /** Shows a state the extension itself knows (disabled, stopped, misconfigured). */
    showClientState(state: ClientState, message = ''): void {
        this.render(clientView(state, message));
    }

    onRestart(): void {
        this.tracker.onRestart();
    }

    dispose(): void {
        this.item.dispose();
    }

    private apply(update: StatusUpdate): void {
        this.render(update.view);
        if (update.warning !== undefined) {
            void this.offerOutput(vscode.window.showWarningMessage(update.warning, 'Show Output'));
        }
        if (update.error !== undefined) {
            void this.offerOutput(vscode.window.showErrorMessage(update.error, 'Show Output'));
        }
    }

    private async offerOutput(choice: Thenable<string | undefined>): Promise<void> {
        if ((await choice) === 'Show Output') {
            this.log.show(true);
        }
    }

    private render(view: StatusView): void {
        this.item.text = view.text;
        this.item.tooltip = view.tooltip;
        this.item.accessibilityInformation = view.ariaLabel ? { label: view.ariaLabel } : undefined;
        const background = BACKGROUNDS[view.severity];
        this.item.backgroundColor = background ? new vscode.ThemeColor(background) : undefined;
        this.item.show();
    }
}
