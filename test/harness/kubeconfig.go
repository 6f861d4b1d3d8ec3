package harness

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func clientcmdConfig(url, token string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["opswire-test"] = &clientcmdapi.Cluster{Server: url, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["opswire-test"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["opswire-test"] = &clientcmdapi.Context{Cluster: "opswire-test", AuthInfo: "opswire-test"}
	cfg.CurrentContext = "opswire-test"
	return cfg
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
