// The Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, the version in
// go.mod, the same as the CRDs in deploy/gateway-api) run against sluice. Upstream's entry
// point is `conformance.RunConformance(t)`; this one differs only where the suite would
// otherwise run nothing useful:
//
//   - With -run-test the suite does not read the GatewayClass's status.supportedFeatures
//     (it infers features only when no test or feature flag is given), so every test would
//     count as unsupported and be skipped. Here the features are then read from the
//     GatewayClass as the full run reads them, so one test runs exactly as in the full run.
//
// Run by scripts/conformance.sh, which starts the cluster and sluice and passes the flags
// (-gateway-class, -conformance-profiles, -report-output, -organization, ...).
package conformance

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/pkg/features"
)

func TestConformance(t *testing.T) {
	opts := conformance.DefaultOptions(t)
	if opts.RunTest != "" && len(opts.SupportedFeatures) == 0 && !opts.EnableAllSupportedFeatures {
		gwc := &gatewayv1.GatewayClass{}
		key := types.NamespacedName{Name: opts.GatewayClassName}
		if err := opts.Client.Get(context.Background(), key, gwc); err != nil {
			t.Fatalf("GatewayClass %s: %v", opts.GatewayClassName, err)
		}
		for _, f := range gwc.Status.SupportedFeatures {
			opts.SupportedFeatures = append(opts.SupportedFeatures, features.FeatureName(f.Name))
		}
		t.Logf("-run-test: supported features from GatewayClass %s: %v", opts.GatewayClassName, opts.SupportedFeatures)
	}
	conformance.RunConformanceWithOptions(t, opts)
}
