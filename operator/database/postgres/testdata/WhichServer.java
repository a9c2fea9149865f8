import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;

// WhichServer connects with pgjdbc to the JDBC URL args[0], runs the query
// args[1] and prints its one value, then how long the connection and the
// query took in milliseconds. A connection to args[2], a server that
// answers, comes first and is not counted: it loads and links the
// driver's classes, which on a busy machine takes seconds of its own.
public class WhichServer {
    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[2])) {
            c.createStatement().executeQuery(args[1]).close();
        }
        long start = System.nanoTime();
        try (Connection c = DriverManager.getConnection(args[0]);
             ResultSet r = c.createStatement().executeQuery(args[1])) {
            r.next();
            System.out.println(r.getString(1));
        }
        System.out.println((System.nanoTime() - start) / 1_000_000);
    }
}
