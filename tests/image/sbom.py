#!/usr/bin/env python3
"""One CycloneDX 1.5 document for the image, from the documents the tools made.

tests/image/build.sh runs cargo-cyclonedx on the host's workspace and on the plugins'
workspace, and cyclonedx-py on the Python plugins' requirements. cargo-cyclonedx reads
`cargo metadata`, whose feature resolution is the whole workspace's: the test crates there turn
on the host's `demo` feature, and with it the test kit, which the image's build
(`--no-default-features`) does not link. So each Rust document is cut down to the packages
`cargo tree` lists for the package as it is built (one `name vX.Y.Z` a line, the file given
beside the document), and the dependency graph with it. The documents are then put under one
component, the image, with the tools that made them.

Usage:
  sbom.py OUT IMAGE_NAME IMAGE_VERSION --rust BOM TREE [--rust BOM TREE ...]
          --python BOM --python-plugin NAME [--python-plugin NAME ...]
"""

import argparse
import json
import sys
import uuid


def tree_packages(path):
    """(name, version) of each package of a `cargo tree --prefix none -f '{p}'` listing."""
    packages = set()
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            parts = line.split()
            if len(parts) >= 2 and parts[1].startswith("v"):
                packages.add((parts[0], parts[1][1:]))
    return packages


def tool_components(tools):
    """The tools of a document as CycloneDX 1.5 components (older documents list them plain)."""
    if isinstance(tools, dict):
        return list(tools.get("components", []))
    out = []
    for tool in tools or []:
        component = {"type": "application", "name": tool.get("name", "")}
        if tool.get("vendor"):
            component["publisher"] = tool["vendor"]
        if tool.get("version"):
            component["version"] = tool["version"]
        out.append(component)
    return out


def flatten(components):
    """Every component, nested ones (a crate's Cargo targets) included, with its own list."""
    for component in components or []:
        yield component
        yield from flatten(component.get("components"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("name")
    parser.add_argument("version")
    parser.add_argument("--rust", nargs=2, action="append", default=[], metavar=("BOM", "TREE"))
    parser.add_argument("--python", required=True)
    parser.add_argument("--python-plugin", action="append", default=[])
    args = parser.parse_args()

    image_ref = f"image:{args.name}@{args.version}"
    components = {}  # bom-ref -> component
    depends = {}  # bom-ref -> set of bom-refs
    tools = {}
    roots = []

    def add_tools(doc):
        for tool in tool_components(doc.get("metadata", {}).get("tools")):
            tools[(tool.get("name"), tool.get("version"))] = tool

    for bom_path, tree_path in args.rust:
        with open(bom_path, encoding="utf-8") as f:
            doc = json.load(f)
        add_tools(doc)
        wanted = tree_packages(tree_path)
        root = dict(doc["metadata"]["component"])
        if (root["name"], root.get("version")) not in wanted:
            sys.exit(f"sbom.py: {root['name']} is not in its own tree {tree_path}")
        kept = {root["bom-ref"]}
        for component in doc.get("components", []):
            if (component["name"], component.get("version")) in wanted:
                kept.add(component["bom-ref"])
                components.setdefault(component["bom-ref"], component)
        missing = wanted - {(c["name"], c.get("version")) for c in doc.get("components", [])}
        missing.discard((root["name"], root.get("version")))
        if missing:
            names = ", ".join(f"{n} {v}" for n, v in sorted(missing))
            sys.exit(f"sbom.py: {bom_path} lacks packages its build uses: {names}")
        # The crate's Cargo targets (its lib, its bins) stay nested under it.
        for nested in flatten(root.get("components")):
            kept.add(nested["bom-ref"])
        components.setdefault(root["bom-ref"], root)
        roots.append(root["bom-ref"])
        for entry in doc.get("dependencies", []):
            if entry["ref"] in kept:
                on = depends.setdefault(entry["ref"], set())
                on.update(d for d in entry.get("dependsOn", []) if d in kept)

    with open(args.python, encoding="utf-8") as f:
        doc = json.load(f)
    add_tools(doc)
    python_refs = []
    for component in doc.get("components", []):
        ref = f"pypi:{component['name']}@{component.get('version', '')}"
        component = dict(component, **{"bom-ref": ref})
        components.setdefault(ref, component)
        depends.setdefault(ref, set())
        python_refs.append(ref)
    for plugin in args.python_plugin:
        ref = f"jobrelay-plugin:{plugin}@{args.version}"
        components[ref] = {
            "type": "application",
            "bom-ref": ref,
            "name": plugin,
            "version": args.version,
            "description": "a plugin of the image written in Python, built by componentize-py "
            "(the CPython interpreter and standard library in the component come with it)",
        }
        depends[ref] = set(python_refs)
        roots.append(ref)

    depends[image_ref] = set(roots)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "tools": {"components": sorted(tools.values(), key=lambda t: t.get("name", ""))},
            "component": {
                "type": "container",
                "bom-ref": image_ref,
                "name": args.name,
                "version": args.version,
                "description": "jobrelay's container image: the daemon and its shipped plugins",
            },
        },
        "components": sorted(components.values(), key=lambda c: (c["name"], c.get("version", ""))),
        "dependencies": [
            {"ref": ref, "dependsOn": sorted(on)} for ref, on in sorted(depends.items())
        ],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(bom, f, indent=2)
        f.write("\n")
    rust = sum(1 for c in components.values() if c.get("purl", "").startswith("pkg:cargo/"))
    python = sum(1 for c in components.values() if c.get("purl", "").startswith("pkg:pypi/"))
    print(f"{args.out}: {len(components)} components ({rust} Rust crates, {python} Python packages)")


if __name__ == "__main__":
    main()
