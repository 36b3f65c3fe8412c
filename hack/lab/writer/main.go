// The lab's culprit (hack/lab/incident.sh culprit): a static binary that writes heavily to the disk its container's
// root is on. O_DIRECT, so that cgroup v1 charges every write to the pod's own blkio cgroup (buffered writeback
// would be charged to the kernel's flusher), and many writes at once, as many as fill a small volume's queue. It
// waits for SIGUSR1 first, so that the lab sets the pod's budget before the first write; then -threads writers each
// fill a file of -file-mib in -block-kib blocks, delete it and start again, until -seconds have passed. Then it
// idles: a restarted container waits for SIGUSR1 again, so it never writes unbudgeted. SIGTERM or SIGINT ends it at
// once (after the writes in flight), exit 0. Built by hack/lab/up.sh with CGO_ENABLED=0, like the pause image.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	dir := flag.String("dir", "/scratch", "where to write (inside the container's root)")
	threads := flag.Int("threads", 32, "concurrent writers (each has one write in flight)")
	blockKiB := flag.Int("block-kib", 1024, "size of each write")
	fileMiB := flag.Int("file-mib", 16, "size of each file before it is deleted and written again")
	seconds := flag.Int("seconds", 240, "how long to write once started")
	flag.Parse()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	start := make(chan os.Signal, 1)
	signal.Notify(start, syscall.SIGUSR1)
	fmt.Println("waiting for SIGUSR1")
	select {
	case <-stop:
		return
	case <-start:
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fail(err)
	}
	deadline := time.Now().Add(time.Duration(*seconds) * time.Second)
	var done atomic.Bool
	var written atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *threads)
	fmt.Printf("writing with O_DIRECT: %d threads, %d KiB blocks, %d MiB files, for %ds\n", *threads, *blockKiB, *fileMiB, *seconds)
	for i := 0; i < *threads; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			path := filepath.Join(*dir, fmt.Sprintf("w%d", i))
			if err := write(path, *blockKiB<<10, int64(*fileMiB)<<20, deadline, &done, &written); err != nil {
				errs <- err
			}
		}(i)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-stop:
		done.Store(true)
		<-finished
		fmt.Printf("stopped by signal after %d MiB\n", written.Load()>>20)
		return
	case <-finished:
	}
	select {
	case err := <-errs:
		fail(err)
	default:
	}
	fmt.Printf("wrote %d MiB; idle until SIGTERM\n", written.Load()>>20)
	<-stop
}

// write fills path in blocks with O_DIRECT, deletes it and starts again, until the deadline or done.
func write(path string, block int, size int64, deadline time.Time, done *atomic.Bool, written *atomic.Int64) error {
	buf := aligned(block)
	for i := range buf {
		buf[i] = byte(i)
	}
	defer os.Remove(path)
	for !done.Load() && time.Now().Before(deadline) {
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_DIRECT, 0o644)
		if err != nil {
			return fmt.Errorf("open %s with O_DIRECT: %w", path, err)
		}
		for off := int64(0); off < size && !done.Load() && time.Now().Before(deadline); off += int64(block) {
			n, err := syscall.Pwrite(fd, buf, off)
			if err != nil {
				syscall.Close(fd)
				return fmt.Errorf("write %s: %w", path, err)
			}
			written.Add(int64(n))
		}
		syscall.Close(fd)
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	return nil
}

// aligned returns n bytes at a 4 KiB boundary, as O_DIRECT requires.
func aligned(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (align - 1))
	if off != 0 {
		off = align - off
	}
	return b[off : off+n]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
