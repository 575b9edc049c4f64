-- Driven by tests/editors/test_neovim.py in `nvim --headless --clean`: loads the documented
-- configuration (editors/neovim/lua/umbra.lua) exactly as a user does, opens a file (the
-- FileType autocommand starts `umbra lsp`), waits for the server's `umbra/status` "ready", then
--   1. asks textDocument/completion at the cursor with vim.lsp.buf_request_sync and applies the
--      item's edit to the buffer (vim.lsp.util.apply_text_edits);
--   2. completes the same spot as a user does: <C-x><C-o> in Insert mode ('omnifunc' set by the
--      configuration), accepting the first match;
--   3. a file of another directory attaches to the same server; :UmbraStatus; :UmbraRestart (a
--      new server, ready again).
-- Everything it saw goes to the JSON file named by the test, then it stops the server (which
-- stops the cloud it started) and quits. Any failure is written there too, and Neovim exits 1.

local spec = vim.fn.json_decode(table.concat(vim.fn.readfile(vim.env.UMBRA_NVIM_SPEC), '\n'))
local out = { stage = 'setup' }

local all_clients = vim.lsp.get_clients or vim.lsp.get_active_clients -- Neovim 0.10+ or before

local function finish(code)
  vim.fn.writefile({ vim.fn.json_encode(out) }, spec.out)
  for _, client in ipairs(all_clients()) do
    vim.lsp.stop_client(client.id)
  end
  vim.wait(spec.timeout_ms, function()
    return #all_clients() == 0
  end, 100)
  out.servers_left = #all_clients()
  vim.fn.writefile({ vim.fn.json_encode(out) }, spec.out)
  vim.cmd(code == 0 and 'qall!' or 'cquit! ' .. code)
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, true), '\n') .. '\n'
end

local function wait_ready(umbra, bufnr)
  out.stage = 'waiting for umbra/status "ready"'
  -- The client the FileType autocommand started (attaching again reuses it), or nil.
  local id = umbra.attach(bufnr, spec.setup)
  if id == nil then
    error('no Umbra client was started for the buffer')
  end
  vim.v.errmsg = ''
  local ok = vim.wait(spec.timeout_ms, function()
    local status = umbra.status()
    -- a server that exited, a status past "starting", or an error (Neovim 0.7 reports a failed
    -- `initialize` only as an error message, and keeps the client)
    return vim.lsp.get_client_by_id(id) == nil or (status ~= nil and status.state ~= 'starting')
      or vim.v.errmsg ~= ''
  end, 100)
  out.status = umbra.status()
  if not ok or out.status == nil or out.status.state ~= 'ready' then
    error(('the server did not become ready (%s): %s %s'):format(
      vim.lsp.get_client_by_id(id) and 'running' or 'exited', vim.inspect(out.status), vim.v.errmsg))
  end
end

local function request_completion(bufnr)
  out.stage = 'textDocument/completion'
  -- The position itself: a Normal-mode cursor cannot stand after the last character of a line.
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = spec.line, character = spec.character } }
  local responses, err = vim.lsp.buf_request_sync(bufnr, 'textDocument/completion', params, spec.timeout_ms)
  if not responses then
    error('no completion response: ' .. tostring(err))
  end
  for _, response in pairs(responses) do
    if response.err then
      error('completion failed: ' .. vim.inspect(response.err))
    end
    out.completion = response.result
  end
  local items = out.completion and (out.completion.items or out.completion) or {}
  if items[1] and items[1].textEdit then
    vim.lsp.util.apply_text_edits({ items[1].textEdit }, bufnr, 'utf-16')
  end
  out.edited = buffer_text(bufnr)
  vim.cmd('silent! undo 0') -- back to the file as it was opened
end

local function omni_complete(bufnr)
  out.stage = 'omnifunc'
  out.omnifunc = vim.bo[bufnr].omnifunc
  vim.api.nvim_win_set_cursor(0, { spec.line + 1, spec.character }) -- Insert mode starts here (i), or at the end (A)
  local deadline = vim.loop.now() + spec.timeout_ms
  local function accept() -- in Insert mode, until the popup has the server's item
    local info = vim.fn.complete_info({ 'items', 'mode' })
    if #info.items > 0 then
      out.omni_items = info.items
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<C-y><Esc>', true, false, true), 'n', false)
    elseif vim.loop.now() > deadline then
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes('<Esc>', true, false, true), 'n', false)
    else
      vim.defer_fn(accept, 50)
    end
  end
  vim.defer_fn(accept, 50)
  local at_end = spec.character >= #vim.api.nvim_get_current_line()
  -- 'x!': execute the keys and stay in Insert mode until the timer leaves it
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes((at_end and 'A' or 'i') .. '<C-x><C-o>', true, false, true),
    'nx!', false)
  out.omni_edited = buffer_text(bufnr)
end

local function second_buffer(umbra, bufnr)
  out.stage = 'a second buffer'
  vim.cmd('split ' .. vim.fn.fnameescape(spec.other_file))
  local other = vim.api.nvim_get_current_buf()
  vim.wait(spec.timeout_ms, function()
    return #umbra.clients(other) > 0
  end, 100)
  local first, second = umbra.clients(bufnr), umbra.clients(other)
  out.one_server = #first == 1 and #second == 1 and first[1].id == second[1].id and #umbra.clients() == 1
  vim.cmd('close')
end

local function restart(umbra, bufnr)
  out.stage = ':UmbraRestart'
  local before = umbra.clients(bufnr)[1].id
  vim.cmd('UmbraRestart')
  local ok = vim.wait(spec.timeout_ms, function()
    local client, status = umbra.clients(bufnr)[1], umbra.status(bufnr)
    return client ~= nil and client.id ~= before and status ~= nil and status.state ~= 'starting'
  end, 100)
  out.restart_status = umbra.status(bufnr)
  out.restarted = ok and out.restart_status.state == 'ready' and vim.lsp.get_client_by_id(before) == nil
end

local function reconfigure(umbra, bufnr)
  out.stage = 'setup() again: new options to the running server'
  local before = umbra.clients(bufnr)[1].id
  local again = vim.deepcopy(spec.setup)
  again.init_options.completion.maxTokens = 1
  umbra.setup(again)
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = spec.line, character = spec.character } }
  local responses = vim.lsp.buf_request_sync(bufnr, 'textDocument/completion', params, spec.timeout_ms) or {}
  for _, response in pairs(responses) do
    local items = response.result and (response.result.items or response.result) or {}
    out.reconfigured_tokens = items[1] and items[1].data and items[1].data.generatedTokens
  end
  out.reconfigured_same_server = umbra.clients(bufnr)[1].id == before and #umbra.clients() == 1
end

local ok, failure = xpcall(function()
  vim.opt.runtimepath:append(spec.plugin_dir)
  local umbra = require('umbra')
  umbra.setup(spec.setup)
  out.stage = 'open'
  vim.cmd('edit ' .. vim.fn.fnameescape(spec.file))
  local bufnr = vim.api.nvim_get_current_buf()
  out.filetype = vim.bo.filetype
  wait_ready(umbra, bufnr) -- a client is listed on the buffer once it is initialized
  out.clients = #umbra.clients(bufnr)
  if out.clients ~= 1 then
    error(('expected one Umbra client on the buffer, got %d (filetype %q)'):format(out.clients, out.filetype))
  end
  out.status_command = vim.api.nvim_exec('UmbraStatus', true)
  request_completion(bufnr)
  omni_complete(bufnr)
  second_buffer(umbra, bufnr)
  restart(umbra, bufnr)
  reconfigure(umbra, bufnr)
  out.stage = 'done'
end, debug.traceback)

if not ok then
  out.error = failure
end
finish(ok and 0 or 1)
