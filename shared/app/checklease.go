package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/kube"
)

// checkLease is --check-config's check against the cluster: may this
// service's credentials take the Lease where the config puts it? Asked with
// SelfSubjectAccessReviews (nothing is written), and only when credentials
// were given (--kubeconfig, $KUBECONFIG, or in a pod), so that a ConfigMap can
// still be checked offline in CI. A refusal is a configuration error: the
// replica would run and never lead. It returns false on a refusal.
func checkLease(spec Spec, opts Options, cfg *config.Config, stdout, stderr io.Writer) bool {
	if spec.NoKube || !cfg.Controller.LeaderElect {
		return true
	}
	if opts.Kubeconfig == "" && os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		fmt.Fprintln(stdout, "# Lease access not checked: no --kubeconfig, $KUBECONFIG or in-cluster credentials")
		return true
	}
	client, _, err := kube.NewClient(kube.Options{Kubeconfig: opts.Kubeconfig, UserAgent: spec.Binary() + "/" + Version})
	if err == nil {
		var refused []string
		refused, err = leaseRefusals(client, cfg.Controller.LeaseLockNamespace, leaseName(cfg, spec, opts.DryRun))
		if err == nil && len(refused) > 0 {
			fmt.Fprintf(stderr, "%s: controller.leaseLockNamespace/leaseLockName: %s; this replica would never lead. "+
				"deploy/ and the Helm chart grant the Lease %s%s in the namespace opswire runs in%s: set "+
				"controller.leaseLockName: opswire and controller.leaseLockNamespace to that namespace\n",
				spec.Binary(), strings.Join(refused, "; "), "opswire-", spec.Service, podNamespaceHint())
			return false
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "# Lease access not checked: %v\n", err)
		return true
	}
	fmt.Fprintf(stdout, "# Lease %s/%s: these credentials may take it\n", cfg.Controller.LeaseLockNamespace, leaseName(cfg, spec, opts.DryRun))
	return true
}

// leaseRefusals asks the API what the elector does with its Lease (create it;
// get and update it by name) and returns each refused request.
func leaseRefusals(client kubernetes.Interface, ns, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var refused []string
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "create"}, {Verb: "get", Name: name}, {Verb: "update", Name: name},
	} {
		a.Namespace, a.Group, a.Resource = ns, "coordination.k8s.io", "leases"
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}},
			metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("SelfSubjectAccessReview: %w", err)
		}
		if !r.Status.Allowed {
			refused = append(refused, fmt.Sprintf("may not %s the Lease %s/%s", a.Verb, ns, name))
		}
	}
	return refused, nil
}

// podNamespaceHint names the namespace of the pod --check-config runs in.
func podNamespaceHint() string {
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return " (here: " + strings.TrimSpace(string(b)) + ")"
	}
	return ""
}
