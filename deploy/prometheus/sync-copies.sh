#!/usr/bin/env bash
# Copies rules.yaml (the one to edit) into the two PrometheusRule objects that ship it:
# deploy/k8s/common/prometheusrule.yaml (kustomize reads no file outside its folder) and
# helm/files/rules.yaml (Helm reads no file outside the chart). Run it after editing rules.yaml;
# tests/deploy/prometheus_test.py fails while the copies differ.
set -euo pipefail
cd "$(dirname "$0")"
cp rules.yaml ../../helm/files/rules.yaml
{
  cat <<'HEADER'
# GENERATED from deploy/prometheus/rules.yaml by deploy/prometheus/sync-copies.sh: edit that
# file and run the script. Needs the Prometheus Operator's PrometheusRule CRD; the Prometheus
# resource must select this object (its ruleSelector, often a `release` label: see
# docs/operations.md).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: llm-serving
  labels:
    app.kubernetes.io/part-of: llm-serving
spec:
HEADER
  # Everything from `groups:` on, indented under spec (empty lines stay empty).
  sed -n '/^groups:/,$p' rules.yaml | sed 's/^\(.\)/  \1/'
} >../k8s/common/prometheusrule.yaml
