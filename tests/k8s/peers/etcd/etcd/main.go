// etcd 3.6 as a test peer (kube-apiserver's storage), built from go.etcd.io/etcd/server/v3
// (see ../go.mod): the same main as upstream's server/main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
