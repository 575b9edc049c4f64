// Drives one headless Chromium (Debian's, through puppeteer-core) for tests/editors/test_code_server.py.
// The test sends one JSON command a line on stdin and reads one JSON reply a line on stdout:
//   {"op": "launch", "chromium": PATH, "puppeteer": DIR}   start the browser (one page, 1400x900)
//   {"op": "goto", "url": URL}                              open code-server's workbench
//   {"op": "press", "key": "Enter", "count": 1}             key presses as a user's ("Control+S" too)
//   {"op": "type", "text": "ret", "delay": 90}              characters typed one by one
//   {"op": "state"}                                         what the page shows: ghost text, status item, cursor
//   {"op": "wait", "what": "ghost" | "no_ghost" | "status", "contains": S, "timeout_ms": N}
//                                                           (ghost: also seen_ms, when it first showed)
//                                                           (status: its label, text and icons' classes)
//   {"op": "wait", "what": "title", "contains": S}          the window's title (the active editor's file)
//   {"op": "wait", "what": "cursor", "contains": "Ln 6,"}   the cursor's position, as the status bar shows it
//   {"op": "open", "name": NAME}                            double-click NAME in the Explorer (a kept editor)
//   {"op": "terminal"}                                      the active integrated terminal's rows (DOM renderer)
//   {"op": "click", "text": "Rotate"}                       click the dialog or notification button so labelled
//   {"op": "screenshot", "path": PATH}
//   {"op": "close"}                                         close the browser and exit
// Replies: {"ok": true, ...} or {"ok": false, "error": "..."}. Nothing else is written to stdout.
import { createInterface } from 'node:readline';
import { createRequire } from 'node:module';
import path from 'node:path';

let browser, page;

// What the workbench shows, read from the DOM: the inline suggestion of the focused editor (VS Code
// renders its first line as decorations after the cursor and the others as a view zone of lines),
// (VS Code 1.139: div.suggest-preview-text > div.view-line per additional line), the Umbra status item's label and the cursor's "Ln X, Col Y".
function pageState() {
    const nb = (s) => s.replace(/\u00a0/g, ' ');
    const editor = document.querySelector('.editor-group-container.active .monaco-editor');
    let ghost = null;
    if (editor) {
        const inline = [...editor.querySelectorAll('.view-lines .ghost-text-decoration, .view-lines .ghost-text-decoration-preview')];
        const zone = [...editor.querySelectorAll('.view-zones .suggest-preview-text .view-line, .view-zones .ghost-text .view-line')];
        if (inline.length || zone.length) {
            ghost = inline.map((e) => nb(e.textContent)).join('');
            for (const line of zone) ghost += '\n' + nb(line.textContent);
        }
    }
    const items = [...document.querySelectorAll('.statusbar-item')];
    const umbra = items.find((e) => (e.id || '').toLowerCase().includes('umbra'));
    const label = umbra ? (umbra.querySelector('a')?.getAttribute('aria-label') || umbra.getAttribute('aria-label') || '') : null;
    const cursor = items.find((e) => e.id === 'status.editor.selection');
    return {
        ghost,
        status: umbra ? { label, text: nb(umbra.textContent),
                          icons: [...umbra.querySelectorAll('.codicon')].map((e) => e.className).join(' ') } : null,
        cursor: cursor ? nb(cursor.textContent) : null,
        title: document.title,
        notifications: [...document.querySelectorAll('.notification-list-item-message')].map((e) => e.textContent),
    };
}

async function handle(cmd) {
    switch (cmd.op) {
        case 'launch': {
            const require = createRequire(path.join(cmd.puppeteer, 'noop.js'));
            const puppeteer = require('puppeteer-core');
            browser = await puppeteer.launch({
                executablePath: cmd.chromium,
                headless: true,
                args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
                       `--user-data-dir=${cmd.profile}`],
                defaultViewport: { width: 1400, height: 900 },
                protocolTimeout: 600_000,
            });
            page = (await browser.pages())[0] ?? await browser.newPage();
            return { version: await browser.version() };
        }
        case 'goto':
            await page.goto(cmd.url, { waitUntil: 'domcontentloaded', timeout: cmd.timeout_ms ?? 300_000 });
            await page.waitForSelector('.monaco-workbench', { timeout: cmd.timeout_ms ?? 300_000 });
            return {};
        case 'press':
            for (let i = 0; i < (cmd.count ?? 1); i++) {
                const keys = cmd.key.split('+');
                for (const k of keys.slice(0, -1)) await page.keyboard.down(k);
                await page.keyboard.press(keys[keys.length - 1]);
                for (const k of keys.slice(0, -1).reverse()) await page.keyboard.up(k);
                await new Promise((r) => setTimeout(r, cmd.delay ?? 60));
            }
            return {};
        case 'type':
            await page.keyboard.type(cmd.text, { delay: cmd.delay ?? 90 });
            return {};
        case 'state':
            return await page.evaluate(pageState);
        case 'wait': {
            const started = Date.now();
            const deadline = started + (cmd.timeout_ms ?? 300_000);
            let last, seen;
            for (;;) {
                last = await page.evaluate(pageState);
                const label = last.status ? `${last.status.label} ${last.status.text} ${last.status.icons}` : '';
                const ghost = last.ghost !== null && last.ghost.length > 0;
                if ((cmd.what === 'ghost' && ghost) || (cmd.what === 'no_ghost' && !ghost) ||
                    (cmd.what === 'status' && label.includes(cmd.contains)) ||
                    (cmd.what === 'title' && last.title.includes(cmd.contains)) ||
                    (cmd.what === 'cursor' && (last.cursor ?? '').startsWith(cmd.contains))) {
                    if (cmd.what !== 'ghost') return last;
                    // a ghost text is read once it is stable (the same for 300 ms); seen_ms: when
                    // ghost text first showed, after the wait began (100 ms polling)
                    seen ??= Date.now();
                    await new Promise((r) => setTimeout(r, 300));
                    const again = await page.evaluate(pageState);
                    if (again.ghost === last.ghost) return { ...again, seen_ms: seen - started };
                    continue;
                }
                if (Date.now() > deadline) return { ...last, timed_out: true };
                await new Promise((r) => setTimeout(r, 100));
            }
        }
        case 'open': {
            const row = await page.waitForFunction((name) => [...document.querySelectorAll('.explorer-folders-view .monaco-list-row')]
                .find((r) => r.querySelector('.label-name')?.textContent === name), { timeout: 60_000 }, cmd.name);
            await row.click({ count: 2 });
            return {};
        }
        case 'terminal':
            return await page.evaluate(() => {
                const rows = [...document.querySelectorAll('.terminal-wrapper.active .xterm-rows > div, .xterm-rows > div')];
                return { rows: [...new Set(rows)].map((r) => r.textContent.replace(/\u00a0/g, ' ')) };
            });
        case 'click': {
            const button = await page.waitForFunction((text) => [...document.querySelectorAll('.monaco-dialog-box .monaco-button, .notifications-toasts .monaco-button')]
                .find((b) => b.textContent.trim() === text), { timeout: cmd.timeout_ms ?? 60_000 }, cmd.text);
            await button.click();
            return {};
        }
        case 'screenshot':
            await page.screenshot({ path: cmd.path });
            return {};
        case 'close':
            if (browser) await browser.close();
            browser = undefined;
            return {};
        default:
            throw new Error(`unknown op ${cmd.op}`);
    }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
    if (!line.trim()) continue;
    let reply;
    try {
        const cmd = JSON.parse(line);
        reply = { ok: true, ...(await handle(cmd)) };
        if (cmd.op === 'close') { process.stdout.write(JSON.stringify(reply) + '\n'); break; }
    } catch (err) {
        reply = { ok: false, error: String(err && err.stack || err) };
    }
    process.stdout.write(JSON.stringify(reply) + '\n');
}
process.exit(0);
