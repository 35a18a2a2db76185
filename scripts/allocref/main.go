// allocref: the reference for engine/dra/allocate.py — kube-scheduler v1.37.2's structured allocator
// (k8s.io/dynamic-resource-allocation/structured v0.37.2, the features on by default) on JSON lines
// {"node": {"name": ..., "labels": {...}}, "slices": [ResourceSlice], "classes": [DeviceClass],
// "claims": [ResourceClaim], "allocated": [[driver, pool, device]]}; prints one JSON line per input:
// {"allocations": [[{"request", "driver", "pool", "device"}]]}, {"unschedulable": "<message>"} or {"error": msg}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type input struct {
	Node struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"node"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Allocated [][3]string                  `json:"allocated"`
}

type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, class := range c {
		if class.Name == name {
			return class, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

type device struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

func main() {
	features := structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true,
		DeviceTaints: true, DeviceBindingAndStatus: true, ConsumableCapacity: true, FractionalCapacityRange: true}
	cache := cel.NewCache(100, cel.Features{EnableConsumableCapacity: true})
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<24), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		var in input
		if err := json.Unmarshal(scanner.Bytes(), &in); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection()}
		for _, d := range in.Allocated {
			state.AllocatedDevices.Insert(structured.MakeDeviceID(d[0], d[1], d[2]))
		}
		allocator, err := structured.NewAllocator(context.Background(), features, state, classes(in.Classes), in.Slices, cache)
		if err != nil {
			_ = out.Encode(map[string]any{"error": err.Error()})
			continue
		}
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Node.Name, Labels: in.Node.Labels}}
		results, err := allocator.Allocate(context.Background(), node, in.Claims)
		switch {
		case errors.Is(err, structured.ErrFailedAllocationOnNode):
			_ = out.Encode(map[string]any{"unschedulable": err.Error()})
		case err != nil:
			_ = out.Encode(map[string]any{"error": err.Error()})
		case len(results) != len(in.Claims):
			_ = out.Encode(map[string]any{"unschedulable": "cannot allocate all claims"})
		default:
			allocations := [][]device{}
			for _, r := range results {
				got := []device{}
				for _, d := range r.Devices.Results {
					got = append(got, device{Request: d.Request, Driver: d.Driver, Pool: d.Pool, Device: d.Device})
				}
				allocations = append(allocations, got)
			}
			_ = out.Encode(map[string]any{"allocations": allocations})
		}
	}
}
