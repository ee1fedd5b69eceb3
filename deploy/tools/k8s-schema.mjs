// k8s-schema.mjs — validate Kubernetes manifests against the API's
// OpenAPI schemas offline, with the npm package kubernetes-models (its
// validate(): types, required fields, enums of the Kubernetes API the
// package was generated from; it does not reject unknown fields).
//
//   node deploy/tools/k8s-schema.mjs MODELS_DIR FILE.yaml...
//
// MODELS_DIR holds node_modules/kubernetes-models (and, for PodMonitor,
// node_modules/@kubernetes-models/prometheus-operator): install with
//   npm install --prefix MODELS_DIR kubernetes-models@5 @kubernetes-models/prometheus-operator
// The YAML is read by python3 (PyYAML) into JSON, so no YAML package is
// needed here. Exits 1 when a document is invalid, 2 when one has a kind
// this script does not know.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modelsDir, ...files] = process.argv.slice(2);
if (!modelsDir || files.length === 0) {
  console.error("usage: node k8s-schema.mjs MODELS_DIR FILE.yaml...");
  process.exit(2);
}
const nm = path.resolve(modelsDir, "node_modules");
const load = (pkg, sub) =>
  import(pathToFileURL(path.join(nm, pkg, sub, "index.js")).href);

const groups = {
  "v1": () => load("kubernetes-models", "v1"),
  "apps/v1": () => load("kubernetes-models", "apps/v1"),
  "networking.k8s.io/v1": () => load("kubernetes-models", "networking.k8s.io/v1"),
  "monitoring.coreos.com/v1": () =>
    load("@kubernetes-models/prometheus-operator", "monitoring.coreos.com/v1"),
};

let bad = 0;
for (const file of files) {
  const json = execFileSync("python3", [
    "-c",
    "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
    file,
  ]);
  for (const doc of JSON.parse(json)) {
    const where = `${path.basename(file)} ${doc.kind}/${doc.metadata?.name ?? "?"}`;
    if (doc.kind === "Kustomization") {
      continue; // kubectl kustomize checks it
    }
    const group = groups[doc.apiVersion];
    if (!group) {
      console.log(`${where}: apiVersion ${doc.apiVersion} not known to this check`);
      bad = bad || 2;
      continue;
    }
    const mod = await group();
    const Model = mod[doc.kind];
    if (!Model) {
      console.log(`${where}: kind ${doc.kind} not in ${doc.apiVersion}`);
      bad = bad || 2;
      continue;
    }
    try {
      new Model(doc).validate();
      console.log(`${where}: valid`);
    } catch (e) {
      console.log(`${where}: INVALID: ${e.message}`);
      bad = 1;
    }
  }
}
process.exit(bad);
