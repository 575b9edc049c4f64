-- Umbra for Neovim's built-in LSP client (Neovim 0.7+): starts `umbra lsp` over stdio for the
-- first buffer of the configured filetypes, attaches every such buffer to that one server, and
-- serves its textDocument/completion through 'omnifunc' (<C-x><C-o>) or any LSP completion plugin.
--
--   vim.opt.runtimepath:append('/path/to/umbra/editors/neovim')
--   require('umbra').setup({ init_options = { completion = { maxTokens = 32 } } })
--
-- init_options is the server's one options schema (lsp/options.py; docs/editors/neovim.md):
-- model.dir|bundle|keyringService|dtype, cloud.url|certificate|tokenEnv,
-- completion.maxTokens|multiline|temperature|topP|contextTokens|languages, languages.aliases,
-- inline.deadlineMs|deadlineGraceMs|repetitionTokens|contextTokens, threads. Never put a token here: the cloud's token comes from the OS keyring or cloud.tokenEnv.
-- The server reads options once, at `initialize`: after a change, call setup() again, then
-- :UmbraRestart.
-- This file is what tests/editors/test_neovim.py loads into a real headless Neovim.

local M = {}

-- The default filetypes: the languages the embedded default model was trained on.
M.filetypes = { 'python', 'go', 'java' }
-- Every Neovim filetype the server has a language name for (umbra/engine/routing.py): for a model
-- that knows more (filetypes = require('umbra').known_filetypes). With a bundle's experts the
-- filetype (the LSP languageId) picks the expert.
M.known_filetypes = {
  'python', 'go', 'java', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'rust',
  'c', 'cpp', 'cs', 'kotlin', 'scala', 'ruby', 'php', 'sh', 'bash',
}

M.defaults = {
  cmd = { 'umbra', 'lsp' }, -- or { '/path/to/.venv/bin/umbra', 'lsp' }
  filetypes = M.filetypes,
  init_options = {}, -- the server's options (lsp/options.py), camelCase
  omnifunc = true, -- set 'omnifunc' to v:lua.vim.lsp.omnifunc in attached buffers
  notify = true, -- vim.notify when the server becomes unreachable / fails, and when it recovers
  capabilities = nil, -- e.g. require('cmp_nvim_lsp').default_capabilities()
  on_attach = nil, -- function(client, bufnr), after Umbra's own
}

local statuses = {} -- client id -> the last `umbra/status` ({state, message, mode, privacy, expert, access})
-- One server per Neovim: it keeps nothing per project, and each server loads the model and
-- starts its own cloud. Its id on Neovim 0.7, which has no vim.lsp.start.
local server_id = nil

-- Object-valued options: an empty Lua table must reach the server as {} (Neovim encodes it as []).
local OBJECTS = { [''] = true, model = true, cloud = true, completion = true, languages = true,
  ['languages.aliases'] = true }

local function json_objects(value, path)
  if type(value) ~= 'table' or getmetatable(value) ~= nil then
    return value
  end
  if next(value) == nil then
    return OBJECTS[path] and vim.empty_dict() or value
  end
  local out = {}
  for key, item in pairs(value) do
    out[key] = json_objects(item, type(key) == 'string' and (path == '' and key or path .. '.' .. key) or path)
  end
  return out
end

--- The init_options as the server must receive them (empty sections as JSON objects).
function M.init_options(options)
  return json_objects(options or {}, '')
end

local LEVELS = { unreachable = vim.log.levels.WARN, error = vim.log.levels.ERROR }

local function on_status(opts)
  return function(_, status, ctx)
    local before = statuses[ctx.client_id]
    statuses[ctx.client_id] = status
    local was = before and before.state
    if opts.notify and status.state ~= was and (LEVELS[status.state] or LEVELS[was or '']) then
      local text = status.message:match('^Umbra') and status.message or 'Umbra: ' .. status.message
      vim.notify(text, LEVELS[status.state] or vim.log.levels.INFO)
    end
    vim.api.nvim_exec_autocmds('User', { pattern = 'UmbraStatus', modeline = false })
  end
end

--- The client configuration, without a root (what vim.lsp.config takes; no root: one server).
function M.config(opts)
  opts = vim.tbl_extend('force', M.defaults, opts or {})
  return {
    name = 'umbra',
    cmd = opts.cmd,
    filetypes = opts.filetypes,
    init_options = M.init_options(opts.init_options),
    capabilities = opts.capabilities,
    handlers = { ['umbra/status'] = on_status(opts) },
    on_attach = function(client, bufnr)
      if opts.omnifunc then
        vim.bo[bufnr].omnifunc = 'v:lua.vim.lsp.omnifunc'
      end
      if opts.on_attach then
        opts.on_attach(client, bufnr)
      end
    end,
    on_exit = function(_, _, client_id)
      statuses[client_id] = nil
    end,
  }
end

--- nvim-lspconfig's default_config: M.config with a root_dir function that names one directory
--- (Neovim's working directory now), so lspconfig runs one server for every buffer.
function M.lspconfig_defaults(opts)
  local config, root = M.config(opts), vim.loop.cwd()
  config.root_dir = function()
    return root
  end
  return config
end

--- Start the server, or reuse the running one, and attach the buffer; the client id.
function M.attach(bufnr, opts)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if vim.bo[bufnr].buftype ~= '' then
    return nil
  end
  local config = M.config(opts)
  config.root_dir = vim.loop.cwd() -- the workspace the server is told of (it keeps nothing per project)
  if vim.lsp.start then -- Neovim 0.8+
    return vim.lsp.start(config, { bufnr = bufnr, reuse_client = function(client, conf)
      return client.name == conf.name
    end })
  end
  if server_id == nil or vim.lsp.get_client_by_id(server_id) == nil then -- none yet, or it exited
    server_id = vim.lsp.start_client(config)
  end
  if server_id then
    vim.lsp.buf_attach_client(bufnr, server_id)
  end
  return server_id
end

--- The Umbra clients (all, or those attached to `bufnr`).
function M.clients(bufnr)
  if vim.lsp.get_clients then -- Neovim 0.10+
    return vim.lsp.get_clients({ name = 'umbra', bufnr = bufnr })
  end
  local found = {}
  for _, client in pairs(bufnr and vim.lsp.buf_get_clients(bufnr) or vim.lsp.get_active_clients()) do
    if client.name == 'umbra' then
      table.insert(found, client)
    end
  end
  return found
end

--- The last `umbra/status` of the server serving `bufnr` (default: the current buffer), or nil.
function M.status(bufnr)
  for _, client in ipairs(M.clients(bufnr or vim.api.nvim_get_current_buf())) do
    if statuses[client.id] then
      return statuses[client.id]
    end
  end
  return nil
end

--- Attach every buffer of `opts.filetypes`, now and when opened; :UmbraStatus, :UmbraRestart.
--- Called again, it sends its init_options to the running server, which applies them in place.
function M.setup(opts)
  opts = vim.tbl_extend('force', M.defaults, opts or {})
  local group = vim.api.nvim_create_augroup('umbra', { clear = true })
  local wanted = {}
  for _, filetype in ipairs(opts.filetypes) do
    wanted[filetype] = true
  end
  vim.api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = opts.filetypes,
    callback = function(args)
      M.attach(args.buf, opts)
    end,
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and wanted[vim.bo[bufnr].filetype] then
      M.attach(bufnr, opts)
    end
  end
  -- A server already running takes the new options in place (workspace/didChangeConfiguration,
  -- lsp/reconfiguration.py): no restart, its documents and warm sessions kept.
  local settings = { settings = M.init_options(opts.init_options) }
  for _, client in ipairs(M.clients()) do
    if vim.fn.has('nvim-0.11') == 1 then
      client:notify('workspace/didChangeConfiguration', settings)
    else
      client.notify('workspace/didChangeConfiguration', settings)
    end
  end
  vim.api.nvim_create_user_command('UmbraStatus', function()
    local status = M.status()
    if status == nil then
      return print('Umbra: no server for this buffer')
    end
    local privacy = status.privacy ~= vim.NIL and status.privacy or 'unknown yet'
    print(('Umbra %s (%s, privacy: %s): %s'):format(status.state, status.mode, privacy, status.message))
  end, { desc = "the Umbra server's last status" })
  vim.api.nvim_create_user_command('UmbraRestart', function()
    local buffers, stopping = {}, M.clients()
    for _, client in ipairs(stopping) do
      for bufnr in pairs(client.attached_buffers or {}) do
        table.insert(buffers, bufnr)
      end
      vim.lsp.stop_client(client.id)
    end
    local deadline = vim.loop.now() + 30000
    server_id = nil
    local function again() -- once the old server is gone (a self-started cloud stops with it)
      for _, client in ipairs(stopping) do
        if vim.lsp.get_client_by_id(client.id) ~= nil and vim.loop.now() < deadline then
          return vim.defer_fn(again, 100)
        end
      end
      for _, bufnr in ipairs(buffers) do
        if vim.api.nvim_buf_is_loaded(bufnr) then
          M.attach(bufnr, opts)
        end
      end
    end
    again()
  end, { desc = "restart the Umbra language server with setup()'s latest options" })
  return opts
end

return M
