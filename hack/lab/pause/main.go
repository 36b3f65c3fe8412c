// The lab's pause (and app) image entrypoint: a static binary that sleeps until SIGTERM or SIGINT and then exits 0,
// so that no image needs to be pulled. Built by hack/lab/up.sh with CGO_ENABLED=0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
