// Command validate decodes every object `helm template` renders (a YAML stream on stdin)
// strictly into its Kubernetes API type: an unknown or misspelt field, a wrong type or
// an unexpected kind fails. kubeconform's schema download cannot reach the internet on
// the project's machines; the API types come from the Go module proxy instead.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

type meta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func target(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Pod":
		// NOTES.txt's repair pod (kubectl run --overrides).
		return &corev1.Pod{}, nil
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("no API type known for %s %s", apiVersion, kind)
}

func main() {
	input, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	failed, objects := 0, 0
	for _, doc := range bytes.Split(input, []byte("\n---")) {
		if len(strings.TrimSpace(strings.TrimPrefix(string(doc), "-"))) == 0 {
			continue
		}
		var m meta
		if err := yaml.Unmarshal(doc, &m); err != nil {
			fmt.Printf("not YAML: %v\n", err)
			failed++
			continue
		}
		if m.Kind == "" {
			continue // a document of comments only
		}
		objects++
		obj, err := target(m.APIVersion, m.Kind)
		if err == nil {
			err = yaml.UnmarshalStrict(doc, obj)
		}
		if err != nil {
			fmt.Printf("%s %s: %v\n", m.Kind, m.Metadata.Name, err)
			failed++
			continue
		}
		fmt.Printf("ok  %s %s\n", m.Kind, m.Metadata.Name)
	}
	if failed > 0 || objects == 0 {
		fmt.Printf("%d of %d objects invalid\n", failed, objects)
		os.Exit(1)
	}
}
