// celref: the reference for engine/dra/cel.py — Kubernetes' own DRA CEL environment (k8s.io/dynamic-resource-allocation/cel v0.37.2) on JSON lines
// {"expression": ..., "driver": ..., "attributes": {name: DeviceAttribute}, "capacity": {name: quantity}};
// prints one JSON line per input: {"result": true|false} or {"compile": msg} or {"runtime": msg}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/cel"
)

type input struct {
	Expression string                                                    `json:"expression"`
	Driver     string                                                    `json:"driver"`
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity   map[resourceapi.QualifiedName]string                      `json:"capacity"`
}

func main() {
	compiler := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true})
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		var in input
		if err := json.Unmarshal(scanner.Bytes(), &in); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		result := compiler.CompileCELExpression(in.Expression, cel.Options{})
		if result.Error != nil {
			_ = out.Encode(map[string]any{"compile": result.Error.Error()})
			continue
		}
		capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
		for name, q := range in.Capacity {
			capacity[name] = resourceapi.DeviceCapacity{Value: resource.MustParse(q)}
		}
		ok, _, err := result.DeviceMatches(context.Background(), cel.Device{Driver: in.Driver, Attributes: in.Attributes, Capacity: capacity})
		if err != nil {
			_ = out.Encode(map[string]any{"runtime": cel.EnhanceRuntimeError(err).Error()})
			continue
		}
		_ = out.Encode(map[string]any{"result": ok})
	}
}
