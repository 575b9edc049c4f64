"""`umbra securegate train --bundle DIR --key-name NAME CODE...`: an organization's secure and
revealing adapters from its code (umbra/tuning/securegate.py), stored in the bundle — the secure
one as a plain adapter, the revealing one only sealed under a new access key, printed once.

The encoder and middle run once per block of code (through a cloud started here by default, or
`--cloud URL`, or `--in-process`); only the client's decoder is trained, so no gradient, label or
logit leaves the machine. The revealing adapter is never written in plaintext."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from umbra.cli.cloud_args import add_cloud_args, cloud_config, with_middle
from umbra.errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("securegate", help="SecureGate: train an organization's secure and revealing adapters")
    s = p.add_subparsers(dest="securegate_command", required=True)
    t = s.add_parser("train", help="scrub the code, train both adapters, fuse (eqs. 6-8), store them: the "
                                   "revealing one sealed under a new access key, printed once")
    t.add_argument("code", nargs="+", type=Path, metavar="CODE",
                   help="the organization's code: directories, files, or .jsonl of {path, text}")
    t.add_argument("--bundle", required=True, type=Path, metavar="DIR", help="client bundle (from `umbra init`)")
    t.add_argument("--model", type=Path, metavar="DIR", help="the public base model (default: where the bundle was made from)")
    t.add_argument("--key-name", required=True, metavar="NAME", help="name of the access key to create")
    t.add_argument("--revealing-name", default="revealing", metavar="NAME", help="revealing adapter name (default: %(default)s)")
    t.add_argument("--secure-name", default="secure", metavar="NAME", help="secure adapter name (default: %(default)s)")
    t.add_argument("--internal-domain", action="append", default=[], metavar="DOMAIN",
                   help="the organization's own domain: its hosts and URLs are scrubbed (repeatable)")
    t.add_argument("--rank", type=int, default=8, help="LoRA rank of both adapters (default: %(default)s)")
    t.add_argument("--epochs", type=int, default=3, help="passes over each view (default: %(default)s)")
    t.add_argument("--lr", type=float, default=2e-3, help="AdamW learning rate (default: %(default)s)")
    t.add_argument("--psi", type=float, default=1e-3, help="L1 strength of the fusion weights, eq. 7 (default: %(default)s)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--global", dest="global_adapter", type=Path, metavar="FILE",
                   help="the federation's global secure adapter (.npz from `umbra federation join --global-out`) "
                        "to fuse with this organization's adapters (eqs. 6-8); default: its own secure adapter")
    t.add_argument("--service", default=None, help="keyring service name (default: umbra)")
    where = t.add_argument_group("where the middle blocks run (default: a cloud service started here)")
    add_cloud_args(where)
    where.add_argument("--in-process", action="store_true", help="run the middle blocks in this process")
    t.set_defaults(func=run)


def run(args) -> int:
    from dataclasses import replace

    from keys import DEFAULT_SERVICE, KeyStore
    from umbra.engine import ClientModel
    from umbra.privacy.bundle_adapters import add_adapter
    from umbra.scrub import ScrubConfig, Scrubber
    from umbra.securegate.bundle_access import add_revealing_adapter, check_name
    from umbra.tuning.dual_adapters import AdapterTrainConfig, DualAdapterConfig
    from umbra.tuning.securegate import OrgTrainConfig, read_org_code

    if args.in_process and (args.cloud or args.token):
        raise ConfigError("--in-process runs without a cloud; drop --cloud/--token")
    check_name(args.key_name)
    store = KeyStore(args.service or DEFAULT_SERVICE)
    base = AdapterTrainConfig(rank=args.rank, epochs=args.epochs, lr=args.lr, seed=args.seed)
    config = OrgTrainConfig(adapters=DualAdapterConfig(base, replace(base)), psi=args.psi,
                            secure_name=args.secure_name, revealing_name=args.revealing_name)
    config.validate()
    files = read_org_code(args.code)
    scrubber = Scrubber(ScrubConfig(internal_domains=tuple(args.internal_domain)) if args.internal_domain else None)
    model = ClientModel.from_bundle(args.bundle, args.model, store=store)
    print(f"training on {len(files)} files (the middle runs forward only, once per block)...", file=sys.stderr)
    global_adapter = None
    if args.global_adapter is not None:
        from umbra.federation.adapter_arrays import load_global

        if not args.global_adapter.is_file():
            raise ConfigError(f"{args.global_adapter} does not exist")
        global_adapter = load_global(args.global_adapter, model)
    result = asyncio.run(_train(model, files, scrubber, config, None if args.in_process else cloud_config(args, audit=False),
                                global_adapter))
    training = {"method": "securegate", "report": result.report}
    add_adapter(args.bundle, result.secure, role="secure", training=training)
    key = add_revealing_adapter(args.bundle, result.revealing, args.key_name, store, training=training,
                                encoder=model.encoder)
    print(json.dumps({k: result.report[k] for k in ("files", "query_files", "scrub_findings", "alpha", "beta")}),
          file=sys.stderr)
    print(f"stored secure adapter {args.secure_name!r} and revealing adapter {args.revealing_name!r} (sealed under "
          f"key {args.key_name!r}). The key follows, shown once: give it to its holders over a secure channel.",
          file=sys.stderr)
    print(key.text())
    return 0


async def _train(model, files, scrubber, config, cloud, global_adapter=None):
    from umbra.tuning.securegate import train_organization

    return await with_middle(model, cloud, lambda middle: train_organization(model, middle, files, scrubber, config,
                                                                             global_adapter=global_adapter))
