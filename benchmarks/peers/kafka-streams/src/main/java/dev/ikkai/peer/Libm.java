package dev.ikkai.peer;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodType;
import jdk.incubator.foreign.CLinker;
import jdk.incubator.foreign.FunctionDescriptor;

/**
 * exp and log1p as ikkai's scorer gets them: numpy calls the C library's functions for float64 on
 * this machine (no AVX-512, so no SIMD kernels of its own), and Java's own {@code Math.exp} and
 * {@code Math.log1p} differ from glibc's in the last bit of about 1 call in 400 (exp) and 1 in
 * 30,000 (log1p). Calling the C library through the foreign linker gives the same bits.
 * {@code --math java} uses Java's functions instead, to see what that costs and changes.
 */
final class Libm {
    private static MethodHandle exp;
    private static MethodHandle log1p;
    private static boolean java = false;

    private Libm() {}

    static synchronized void use(String which) {
        if (which.equals("java")) {
            java = true;
            return;
        }
        if (!which.equals("libm")) {
            throw new IllegalArgumentException("--math is libm or java, not " + which);
        }
        CLinker linker = CLinker.getInstance();
        MethodType type = MethodType.methodType(double.class, double.class);
        FunctionDescriptor descriptor = FunctionDescriptor.of(CLinker.C_DOUBLE, CLinker.C_DOUBLE);
        exp = linker.downcallHandle(CLinker.systemLookup().lookup("exp").orElseThrow(), type, descriptor);
        log1p = linker.downcallHandle(CLinker.systemLookup().lookup("log1p").orElseThrow(), type, descriptor);
    }

    static double exp(double x) {
        if (java) {
            return Math.exp(x);
        }
        try {
            return (double) exp.invokeExact(x);
        } catch (Throwable t) {
            throw new IllegalStateException("exp from the C library failed", t);
        }
    }

    static double log1p(double x) {
        if (java) {
            return Math.log1p(x);
        }
        try {
            return (double) log1p.invokeExact(x);
        } catch (Throwable t) {
            throw new IllegalStateException("log1p from the C library failed", t);
        }
    }
}
