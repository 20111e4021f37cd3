package org.libcism;

import org.junit.runner.Description;
import org.junit.runner.JUnitCore;
import org.junit.runner.Result;
import org.junit.runner.notification.Failure;
import org.junit.runner.notification.RunListener;

/** Runs HostJvmTest with one line per test and a closing "N passed, N failed" line. */
public final class HostTestMain {
    private HostTestMain() {}

    public static void main(String[] args) {
        JUnitCore core = new JUnitCore();
        core.addListener(new RunListener() {
            private long start;
            private boolean failed;

            @Override
            public void testStarted(Description d) {
                start = System.nanoTime();
                failed = false;
            }

            @Override
            public void testFailure(Failure f) {
                failed = true;
                System.out.println("FAIL " + f.getDescription().getMethodName() + ": " + f.getException());
                f.getException().printStackTrace(System.out);
            }

            @Override
            public void testFinished(Description d) {
                if (!failed) {
                    System.out.printf("PASS %s (%.2f s)%n", d.getMethodName(), (System.nanoTime() - start) / 1e9);
                }
            }
        });
        Result r = core.run(HostJvmTest.class);
        System.out.println("jvm: " + (r.getRunCount() - r.getFailureCount()) + " passed, " + r.getFailureCount() + " failed");
        System.exit(r.wasSuccessful() && r.getRunCount() > 0 ? 0 : 1);
    }
}
